//! Counts what the nodes report in their logs during one seed — snapshots built and installed,
//! elections won — so a sweep can show which behaviours its faults actually provoked (a fault
//! mix that asks for snapshot installs is not proof that one happened).
//!
//! A tracing layer feeds thread-local counters: madsim runs a whole seed on one thread, so the
//! counts of seeds running on other threads do not mix.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::Once;

use tracing::field::{Field, Visit};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

thread_local! {
    static COUNTS: RefCell<BTreeMap<&'static str, u64>> = const { RefCell::new(BTreeMap::new()) };
    /// The simulated nodes that began a snapshot install since the fault driver last looked.
    static INSTALLING: RefCell<Vec<madsim::task::NodeId>> = const { RefCell::new(Vec::new()) };
}

/// What a node logs when it begins to replace its state with a snapshot.
const INSTALL_BEGINS: &str = "installing a snapshot";

/// The log messages counted, by the name they are reported under.
const COUNTED: [(&str, &str); 4] = [
    (
        "snapshot-installed",
        "installed a snapshot; its audit chain verified",
    ),
    ("snapshot-built", "built a snapshot"),
    ("snapshot-refused", "refused a snapshot"),
    ("leader-elected", "becomes leader"),
];

struct Counter;

struct Message(Option<String>);

impl Visit for Message {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0 = Some(value.to_string());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = Some(format!("{value:?}"));
        }
    }
}

impl<S: tracing::Subscriber> Layer<S> for Counter {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let mut message = Message(None);
        event.record(&mut message);
        let Some(text) = message.0 else { return };
        for (name, needle) in COUNTED {
            if text.contains(needle) {
                COUNTS.with(|c| *c.borrow_mut().entry(name).or_insert(0) += 1);
            }
        }
        if text.contains(INSTALL_BEGINS) {
            INSTALLING.with(|i| i.borrow_mut().push(madsim::plugin::node()));
        }
    }
}

/// Installs the process-wide subscriber once: the counting layer, plus the nodes' logs on
/// stderr when `ENGRAM_SIM_LOG` holds a filter (e.g. `info`).
pub fn init() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        let counted = Targets::new()
            .with_target("engram_raft", tracing::Level::INFO)
            .with_target(
                "openraft::engine::handler::server_state_handler",
                tracing::Level::INFO,
            );
        let logs = std::env::var("ENGRAM_SIM_LOG").ok().map(|filter| {
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(EnvFilter::new(filter))
        });
        let _ = tracing_subscriber::registry()
            .with(Counter.with_filter(counted))
            .with(logs)
            .try_init();
    });
}

/// Clears this thread's counts (at the start of a seed).
pub fn reset() {
    COUNTS.with(|c| c.borrow_mut().clear());
    INSTALLING.with(|i| i.borrow_mut().clear());
}

/// The simulated nodes that began a snapshot install since the last call.
pub fn take_installing() -> Vec<madsim::task::NodeId> {
    INSTALLING.with(|i| std::mem::take(&mut *i.borrow_mut()))
}

/// This thread's counts since the last reset.
pub fn take() -> BTreeMap<&'static str, u64> {
    COUNTS.with(|c| std::mem::take(&mut *c.borrow_mut()))
}
