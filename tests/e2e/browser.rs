//! Headless Chromium driven over the DevTools protocol, for the tests of `hpcview-rs --html`.
//!
//! Chromium is started with `--remote-debugging-pipe`: it reads protocol commands (JSON, each
//! ended by a NUL byte) on file descriptor 3 and writes replies and events on descriptor 4, the
//! transport Puppeteer and Playwright use. That needs no HTTP or WebSocket client, only pipes and
//! `serde_json`. Clicks and typing go through `Input.*` commands (real input events, hit-tested
//! by the browser), not through the page's own JavaScript.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};

/// How long one protocol command may take.
const REPLY_TIMEOUT: Duration = Duration::from_secs(60);

/// The Chromium binary, or `None` (with the reason printed) where it is missing and the run is
/// not CI's, which must have it (`scripts/install-chromium`).
pub fn chromium() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("chromium"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "chromium is missing: run scripts/install-chromium"
        );
        eprintln!("skipped: chromium is not installed (scripts/install-chromium installs it)");
    }
    found
}

/// One headless Chromium with one page attached.
pub struct Browser {
    child: Child,
    commands: File,
    messages: Receiver<Value>,
    next_id: u64,
    session: String,
    /// Protocol events received so far (`Network.requestWillBeSent`, ...).
    pub events: Vec<Value>,
}

impl Browser {
    /// Start `chromium` headless, `width` x `height` pixels, its profile in `dir`, with a blank
    /// page attached and the network domain recording requests.
    pub fn launch(chromium: &Path, dir: &Path, width: u32, height: u32) -> Browser {
        let (to_chrome_r, to_chrome_w) = std::io::pipe().expect("pipe");
        let (from_chrome_r, from_chrome_w) = std::io::pipe().expect("pipe");
        let (r, w) = (to_chrome_r.as_raw_fd(), from_chrome_w.as_raw_fd());
        let mut cmd = Command::new(chromium);
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--disable-dev-shm-usage",
            "--remote-debugging-pipe",
            &format!("--window-size={width},{height}"),
            &format!("--user-data-dir={}", dir.join("chromium-profile").display()),
            "about:blank",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        // SAFETY: only async-signal-safe calls (fcntl, dup2) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                // Move both ends above 4 first, so that neither is overwritten by the other's dup2.
                let hr = libc::fcntl(r, libc::F_DUPFD_CLOEXEC, 10);
                let hw = libc::fcntl(w, libc::F_DUPFD_CLOEXEC, 10);
                if hr < 0 || hw < 0 || libc::dup2(hr, 3) < 0 || libc::dup2(hw, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("start chromium");
        drop(to_chrome_r);
        drop(from_chrome_w);
        let (tx, messages) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(from_chrome_r);
            let mut buf = Vec::new();
            while reader.read_until(0, &mut buf).is_ok_and(|n| n > 0) {
                buf.pop();
                if let Ok(v) = serde_json::from_slice(&buf) {
                    if tx.send(v).is_err() {
                        break;
                    }
                }
                buf.clear();
            }
        });
        let mut b = Browser {
            child,
            commands: File::from(OwnedFd::from(to_chrome_w)),
            messages,
            next_id: 0,
            session: String::new(),
            events: Vec::new(),
        };
        b.attach();
        b
    }

    /// Attach to the blank page the browser opened and turn on what the tests observe.
    fn attach(&mut self) {
        let targets = self.browser_call("Target.getTargets", json!({}));
        let page = targets["targetInfos"]
            .as_array()
            .and_then(|t| t.iter().find(|t| t["type"] == "page"))
            .expect("chromium opened a page")["targetId"]
            .clone();
        let attached = self.browser_call(
            "Target.attachToTarget",
            json!({"targetId": page, "flatten": true}),
        );
        self.session = attached["sessionId"].as_str().expect("session").into();
        self.call("Network.enable", json!({}));
        self.call("Page.enable", json!({}));
    }

    fn send(&mut self, method: &str, params: Value, session: Option<String>) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = s.into();
        }
        let mut bytes = serde_json::to_vec(&msg).unwrap();
        bytes.push(0);
        self.commands.write_all(&bytes).expect("send to chromium");
        loop {
            let m = self
                .messages
                .recv_timeout(REPLY_TIMEOUT)
                .unwrap_or_else(|e| panic!("no reply from chromium to {method}: {e}"));
            if m["id"] == id {
                assert!(m.get("error").is_none(), "{method} failed: {}", m["error"]);
                return m["result"].clone();
            }
            if m.get("method").is_some() {
                self.events.push(m);
            }
        }
    }

    fn browser_call(&mut self, method: &str, params: Value) -> Value {
        self.send(method, params, None)
    }

    /// Send `method` to the page; returns its result.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let session = Some(self.session.clone());
        self.send(method, params, session)
    }

    /// Evaluate `expression` in the page; returns its value (promises awaited). An exception in
    /// the page fails the test with its message.
    pub fn eval(&mut self, expression: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
        );
        assert!(
            r.get("exceptionDetails").is_none(),
            "{expression}: {}",
            r["exceptionDetails"]
        );
        r["result"]["value"].clone()
    }

    /// Open `file` and wait until `ready` (a JavaScript expression) is true; returns the
    /// milliseconds from navigation to ready, as the page's clock measures them.
    pub fn open(&mut self, file: &Path, ready: &str) -> f64 {
        let url = format!("file://{}", file.canonicalize().unwrap().display());
        self.call("Page.navigate", json!({ "url": url }));
        let poll = format!(
            "new Promise((done, fail) => {{ const t0 = Date.now(); const tick = () => {{ \
             if (document.readyState === 'complete' && ({ready})) done(performance.now()); \
             else if (Date.now() - t0 > 60000) fail(new Error('page not ready')); \
             else setTimeout(tick, 20); }}; tick(); }})"
        );
        self.eval(&poll).as_f64().expect("ready time")
    }

    /// Click the centre of the first element matching `selector` with the mouse.
    pub fn click(&mut self, selector: &str) {
        let js = format!(
            "(() => {{ const e = document.querySelector({sel}); if (!e) return null; \
             e.scrollIntoView({{block: 'center'}}); const r = e.getBoundingClientRect(); \
             return [r.left + Math.min(r.width / 2, 8), r.top + r.height / 2]; }})()",
            sel = json!(selector)
        );
        let at = self.eval(&js);
        let [x, y] = [&at[0], &at[1]].map(|v| {
            v.as_f64()
                .unwrap_or_else(|| panic!("no element {selector} to click"))
        });
        for kind in ["mousePressed", "mouseReleased"] {
            self.call(
                "Input.dispatchMouseEvent",
                json!({"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}),
            );
        }
    }

    /// Focus the element matching `selector` and type `text` into it.
    pub fn type_into(&mut self, selector: &str, text: &str) {
        self.click(selector);
        self.call("Input.insertText", json!({ "text": text }));
    }

    /// Press and release `key` (a DOM key name such as `ArrowDown` or `Enter`) in the focused
    /// element.
    pub fn press(&mut self, key: &str) {
        let code = match key {
            "Enter" => 13,
            "ArrowLeft" => 37,
            "ArrowUp" => 38,
            "ArrowRight" => 39,
            "ArrowDown" => 40,
            other => panic!("no key code for {other}"),
        };
        for kind in ["rawKeyDown", "keyUp"] {
            self.call(
                "Input.dispatchKeyEvent",
                json!({"type": kind, "key": key, "code": key, "windowsVirtualKeyCode": code}),
            );
        }
    }

    /// Save a PNG of the page at `path`.
    pub fn screenshot(&mut self, path: &Path) {
        let shot = self.call("Page.captureScreenshot", json!({"format": "png"}));
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().expect("screenshot data"))
            .expect("base64 screenshot");
        assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
        std::fs::write(path, png).expect("write screenshot");
    }

    /// The URLs of every request the page made.
    pub fn requested_urls(&self) -> Vec<String> {
        self.events
            .iter()
            .filter(|e| e["method"] == "Network.requestWillBeSent")
            .map(|e| {
                e["params"]["request"]["url"]
                    .as_str()
                    .unwrap_or("")
                    .to_string()
            })
            .collect()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
