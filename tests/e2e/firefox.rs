//! Headless Firefox driven over Marionette (its own remote protocol, the one geckodriver
//! speaks to it), so that the tests of `hpcview-rs --html` check the report in Firefox too.
//!
//! Firefox starts with `--marionette --headless` and a fresh profile whose `user.js` sets
//! `marionette.port` to 0: it listens on a free local port and writes the port to
//! `MarionetteActivePort` in the profile. Each message is `LENGTH:JSON`; a command is
//! `[0, id, name, params]` and its reply `[1, id, error, result]`. Clicks and typing go through
//! WebDriver's element commands (real input events, hit-tested by the browser).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};

/// How long Firefox may take to start, a command to answer, or a page to become ready.
const TIMEOUT: Duration = Duration::from_secs(60);

/// WebDriver's key for an element reference.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// The Firefox binary (`firefox-esr` or `firefox`), or `None` (with the reason printed) where
/// it is missing and the run is not CI's, which must have it (`scripts/install-firefox`).
pub fn firefox() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .flat_map(|d| [d.join("firefox-esr"), d.join("firefox")])
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "firefox is missing: run scripts/install-firefox"
        );
        eprintln!("skipped: firefox is not installed (scripts/install-firefox installs it)");
    }
    found
}

/// One headless Firefox with a WebDriver session.
pub struct Firefox {
    child: Child,
    stream: BufReader<TcpStream>,
    next_id: u64,
}

impl Firefox {
    /// Start `firefox` headless with a fresh profile in `dir` and open a session.
    pub fn launch(firefox: &Path, dir: &Path) -> Firefox {
        let profile = dir.join("firefox-profile");
        let _ = std::fs::remove_dir_all(&profile);
        std::fs::create_dir_all(&profile).unwrap();
        std::fs::write(
            profile.join("user.js"),
            "user_pref(\"marionette.port\", 0);\n",
        )
        .unwrap();
        let child = Command::new(firefox)
            .args(["--headless", "--marionette", "--no-remote", "--profile"])
            .arg(&profile)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start firefox");
        let port = wait_for(|| {
            let text = std::fs::read_to_string(profile.join("MarionetteActivePort")).ok()?;
            text.trim().parse::<u16>().ok().filter(|&p| p != 0)
        })
        .expect("firefox wrote its Marionette port");
        let stream = wait_for(|| TcpStream::connect(("127.0.0.1", port)).ok())
            .expect("connect to Marionette");
        stream.set_read_timeout(Some(TIMEOUT)).unwrap();
        let mut ff = Firefox {
            child,
            stream: BufReader::new(stream),
            next_id: 0,
        };
        let hello = ff.read_message();
        assert_eq!(hello["applicationType"], "gecko", "{hello}");
        ff.call("WebDriver:NewSession", json!({"capabilities": {}}));
        ff
    }

    /// One `LENGTH:JSON` message.
    fn read_message(&mut self) -> Value {
        let mut len = Vec::new();
        self.stream
            .read_until(b':', &mut len)
            .expect("read Marionette");
        len.pop();
        let len: usize = std::str::from_utf8(&len).unwrap().parse().expect("length");
        let mut body = vec![0; len];
        self.stream.read_exact(&mut body).expect("read Marionette");
        serde_json::from_slice(&body).expect("Marionette JSON")
    }

    /// Send command `name`; returns its result (an error fails the test).
    pub fn call(&mut self, name: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let body = json!([0, id, name, params]).to_string();
        let msg = format!("{}:{body}", body.len());
        self.stream
            .get_mut()
            .write_all(msg.as_bytes())
            .expect("send to Marionette");
        loop {
            let reply = self.read_message();
            if reply[0] == 1 && reply[1] == id {
                assert!(reply[2].is_null(), "{name} failed: {}", reply[2]);
                return reply[3].clone();
            }
        }
    }

    /// The value of the JavaScript `expression` in the page.
    pub fn eval(&mut self, expression: &str) -> Value {
        let script = format!("return ({expression});");
        self.call(
            "WebDriver:ExecuteScript",
            json!({"script": script, "args": []}),
        )["value"]
            .clone()
    }

    /// Open `file` and wait until `ready` (a JavaScript expression) is true.
    pub fn open(&mut self, file: &Path, ready: &str) {
        let url = format!("file://{}", file.canonicalize().unwrap().display());
        self.call("WebDriver:Navigate", json!({ "url": url }));
        let check = format!("document.readyState === 'complete' && ({ready})");
        wait_for(|| (self.eval(&check) == json!(true)).then_some(()))
            .unwrap_or_else(|| panic!("{} did not become ready", file.display()));
    }

    /// The first element matching `selector`.
    fn element(&mut self, selector: &str) -> Value {
        let found = self.call(
            "WebDriver:FindElement",
            json!({"using": "css selector", "value": selector}),
        );
        found["value"][ELEMENT].clone()
    }

    /// Click the first element matching `selector`.
    pub fn click(&mut self, selector: &str) {
        let id = self.element(selector);
        self.call("WebDriver:ElementClick", json!({ "id": id }));
    }

    /// Type `text` into the first element matching `selector`.
    pub fn type_into(&mut self, selector: &str, text: &str) {
        let id = self.element(selector);
        self.call("WebDriver:ElementSendKeys", json!({"id": id, "text": text}));
    }

    /// Save a PNG of the page at `path`.
    pub fn screenshot(&mut self, path: &Path) {
        let shot = self.call("WebDriver:TakeScreenshot", json!({}));
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["value"].as_str().expect("screenshot data"))
            .expect("base64 screenshot");
        assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
        std::fs::write(path, png).expect("write screenshot");
    }
}

impl Drop for Firefox {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Poll `f` every 50 ms until it gives a value, for at most [`TIMEOUT`].
fn wait_for<T>(mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    while start.elapsed() < TIMEOUT {
        if let Some(v) = f() {
            return Some(v);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}
