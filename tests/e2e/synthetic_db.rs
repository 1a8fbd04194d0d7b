//! Databases built through the library's public API with known costs, for the tests of the
//! view's outputs that need exact numbers (per-thread costs, shaping, CSV).

use std::path::Path;

use correlate::{
    ChildIndex, Database, DbFileId, DbModuleId, DbNodeId, MetricDesc, ModuleDesc, NodeKey,
    NodeKind, StructureSource, ThreadDesc, ThreadIdx,
};
use profiler::db::{Cost, Sampling};

/// Builds a database through the library's public API: one module, one file, `threads`
/// threads, a 1 ms clock.
pub struct Builder {
    db: Database,
    index: ChildIndex,
}

impl Builder {
    pub fn new(threads: u32) -> Builder {
        Builder::for_source("/opt/synth/app.c", threads)
    }

    /// A builder whose one source file is `source`.
    pub fn for_source(source: &str, threads: u32) -> Builder {
        let metric = MetricDesc::new("cpu-clock", "ns", Sampling::Period(1_000_000));
        let mut db = Database::new(vec![metric]);
        db.modules.push(ModuleDesc {
            path: "/opt/synth/app".into(),
            build_id: None,
            structure: StructureSource::OnTheFly,
        });
        db.files.push(source.into());
        for t in 0..threads {
            db.threads.push(ThreadDesc {
                profile: 0,
                pid: 100,
                tid: 100 + t,
                comm: format!("worker{t}"),
            });
        }
        Builder {
            db,
            index: ChildIndex::default(),
        }
    }

    pub fn add(&mut self, parent: DbNodeId, kind: NodeKind, name: &str, line: u32) -> DbNodeId {
        self.add_at(parent, kind, name, line, None)
    }

    /// A call from `parent` at `line` to procedure `name` declared at `decl`: the statement
    /// (call site) and the callee's frame.
    pub fn call(&mut self, parent: DbNodeId, line: u32, name: &str, decl: u32) -> DbNodeId {
        let site = self.add(parent, NodeKind::Statement, "", line);
        self.add_at(site, NodeKind::Procedure, name, decl, Some(line))
    }

    /// A scope at `line`, called from line `site` when it is a procedure frame.
    fn add_at(
        &mut self,
        parent: DbNodeId,
        kind: NodeKind,
        name: &str,
        line: u32,
        site: Option<u32>,
    ) -> DbNodeId {
        let key = NodeKey {
            kind,
            name: name.into(),
            module: Some(DbModuleId(0)),
            file: Some(DbFileId(0)),
            line: Some(line),
            end_line: None,
            call_file: site.map(|_| DbFileId(0)),
            call_line: site,
        };
        self.db.child(&mut self.index, parent, key)
    }

    /// `samples` 1 ms samples at `at` in thread `thread`.
    pub fn sample(&mut self, at: DbNodeId, thread: u32, samples: u64) {
        let cost = Cost {
            samples,
            value: samples * 1_000_000,
        };
        self.db.add_cost(at, ThreadIdx(thread), &[cost]);
    }

    /// The database, its totals computed.
    pub fn into_database(mut self) -> Database {
        self.db.compute_totals();
        self.db
    }

    pub fn finish(self, path: &Path) {
        self.into_database()
            .write_new(path)
            .expect("write the database");
    }
}

/// Two threads: `work` (line 11) has 10 samples in thread 0 and 30 in thread 1; `main`'s line
/// 6 has 20 in thread 0 only. So each thread has 30 samples.
pub fn two_threads(path: &Path) {
    let mut b = Builder::new(2);
    let main = b.add(DbNodeId::ROOT, NodeKind::Procedure, "main", 1);
    let own = b.add(main, NodeKind::Statement, "", 6);
    let work = b.add(main, NodeKind::Procedure, "work", 10);
    let line = b.add(work, NodeKind::Statement, "", 11);
    b.sample(line, 0, 10);
    b.sample(line, 1, 30);
    b.sample(own, 0, 20);
    b.finish(path);
}
