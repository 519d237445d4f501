//! The series controller-runtime exports for every controller, under its names, so dashboards
//! and alerts written for Go operators (kubebuilder, Operator SDK) work unchanged:
//!
//! - `controller_runtime_reconcile_total{controller, result}`: every reconcile, by `result`
//!   (`success`, `error`, `requeue`, `requeue_after`; a reconcile that asks to run again after a
//!   delay is `requeue_after`, as controller-runtime counts a `Result{RequeueAfter}`);
//! - `controller_runtime_reconcile_errors_total{controller}`: the reconciles that failed;
//! - `workqueue_depth{controller, name}` and `workqueue_adds_total{controller, name}`: the
//!   controller's queue of keys, for a controller that has one (`name` is the controller's
//!   name, as controller-runtime sets both labels).
//!
//! They are unprefixed, as controller-runtime's are, and beside the operator's own
//! `disruption_guard_reconcile_duration_seconds` ([`super::reconciles`]). The queue is kube's
//! `Controller` scheduler, which has no metrics of its own; [`Pending`] keeps the client-go
//! work queue's accounting from what enters it (a wake-up) and what leaves it (a reconcile
//! starting): an add of a key already waiting is no add, the depth is the number of keys
//! waiting, and a reconcile of a key nothing added is a requeue whose delay ran out (client-go
//! adds it to the queue at that moment, and takes it at once).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use kube::runtime::controller::Action;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The values of `result` in `controller_runtime_reconcile_total`, as controller-runtime has
/// them (all four exist from the start, at 0).
pub const RESULTS: [&str; 4] = ["success", "error", "requeue", "requeue_after"];

/// Labels of `controller_runtime_reconcile_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// The controller, as the wiring names it.
    pub controller: &'static str,
    /// One of [`RESULTS`].
    pub result: &'static str,
}

/// Label of `controller_runtime_reconcile_errors_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabel {
    /// The controller, as the wiring names it.
    pub controller: &'static str,
}

/// Labels of the `workqueue_*` series: the queue's `name` is its controller's.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    /// The queue, named after its controller.
    pub name: &'static str,
    /// The controller.
    pub controller: &'static str,
}

/// The families, shared by every controller; the wiring registers them once.
#[derive(Debug, Clone, Default)]
pub struct ControllerRuntimeMetrics {
    reconciles: Family<ResultLabels, Counter>,
    errors: Family<ControllerLabel, Counter>,
    depth: Family<QueueLabels, Gauge>,
    adds: Family<QueueLabels, Counter>,
}

impl ControllerRuntimeMetrics {
    /// Registers the families without the operator's prefix (pass the root registry).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            self.reconciles.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            self.errors.clone(),
        );
        registry.register(
            "workqueue_depth",
            "Current depth of workqueue",
            self.depth.clone(),
        );
        registry.register(
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            self.adds.clone(),
        );
    }

    /// The reconcile series of `controller`; each of its results exists from now on, at 0.
    pub fn controller(&self, controller: &'static str) -> ControllerSeries {
        for result in RESULTS {
            drop(
                self.reconciles
                    .get_or_create(&ResultLabels { controller, result }),
            );
        }
        drop(self.errors.get_or_create(&ControllerLabel { controller }));
        ControllerSeries {
            controller,
            reconciles: self.reconciles.clone(),
            errors: self.errors.clone(),
        }
    }

    /// The queue series of `controller`, at 0 from now on.
    pub fn work_queue(&self, controller: &'static str) -> WorkQueue {
        let labels = QueueLabels {
            name: controller,
            controller,
        };
        WorkQueue {
            depth: self.depth.get_or_create(&labels).clone(),
            adds: self.adds.get_or_create(&labels).clone(),
            pending: Arc::default(),
        }
    }
}

/// How a reconcile ended, as controller-runtime labels it.
pub fn result_of<E>(result: &Result<Action, E>) -> &'static str {
    match result {
        Err(_) => "error",
        Ok(action) if *action == Action::await_change() => "success",
        Ok(_) => "requeue_after",
    }
}

/// One controller's reconcile series.
#[derive(Debug, Clone)]
pub struct ControllerSeries {
    controller: &'static str,
    reconciles: Family<ResultLabels, Counter>,
    errors: Family<ControllerLabel, Counter>,
}

impl Default for ControllerSeries {
    /// Over families of its own, registered nowhere (a component's own tests).
    fn default() -> Self {
        ControllerRuntimeMetrics::default().controller("unregistered")
    }
}

impl ControllerSeries {
    /// Counts one reconcile that ended with `result` (one of [`RESULTS`]; an `error` is also
    /// counted in `controller_runtime_reconcile_errors_total`).
    pub fn reconciled(&self, result: &'static str) {
        let labels = ResultLabels {
            controller: self.controller,
            result,
        };
        self.reconciles.get_or_create(&labels).inc();
        if result == "error" {
            let label = ControllerLabel {
                controller: self.controller,
            };
            self.errors.get_or_create(&label).inc();
        }
    }
}

/// Keys waiting in a queue, with client-go's accounting of adds (pure).
#[derive(Debug, Default)]
pub struct Pending {
    keys: HashSet<String>,
}

impl Pending {
    /// `key` is added; true when this is an add (it was not waiting already).
    pub fn add(&mut self, key: &str) -> bool {
        !self.keys.contains(key) && self.keys.insert(key.to_owned())
    }

    /// `key` is taken to be reconciled; true when an add put it there, false for a requeue
    /// whose delay ran out (added and taken at once).
    pub fn take(&mut self, key: &str) -> bool {
        self.keys.remove(key)
    }

    /// How many keys wait.
    pub fn depth(&self) -> usize {
        self.keys.len()
    }
}

/// One controller's queue series, and the keys waiting in its queue.
#[derive(Debug, Clone)]
pub struct WorkQueue {
    depth: Gauge,
    adds: Counter,
    pending: Arc<Mutex<Pending>>,
}

impl Default for WorkQueue {
    /// Over families of its own, registered nowhere (a component's own tests).
    fn default() -> Self {
        ControllerRuntimeMetrics::default().work_queue("unregistered")
    }
}

impl WorkQueue {
    /// A wake-up of `key` reached the queue.
    pub fn added(&self, key: &str) {
        let mut pending = self.pending.lock().expect("work queue lock");
        if pending.add(key) {
            self.adds.inc();
        }
        self.depth.set(depth(&pending));
    }

    /// A reconcile of `key` starts.
    pub fn taken(&self, key: &str) {
        let mut pending = self.pending.lock().expect("work queue lock");
        if !pending.take(key) {
            self.adds.inc();
        }
        self.depth.set(depth(&pending));
    }
}

fn depth(pending: &Pending) -> i64 {
    i64::try_from(pending.depth()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn encoded(m: &ControllerRuntimeMetrics) -> String {
        let mut registry = Registry::default();
        m.register(&mut registry);
        crate::testing::encode(&registry)
    }

    fn has(out: &str, line: &str) {
        assert!(
            out.contains(&format!("{line}\n")),
            "missing {line} in\n{out}"
        );
    }

    #[test]
    fn a_controller_exports_every_result_and_its_queue_at_zero_under_controller_runtimes_names() {
        let m = ControllerRuntimeMetrics::default();
        drop(m.controller("window"));
        drop(m.work_queue("window"));
        let out = encoded(&m);
        for result in RESULTS {
            has(
                &out,
                &format!(
                    "controller_runtime_reconcile_total{{controller=\"window\",result=\"{result}\"}} 0"
                ),
            );
        }
        has(
            &out,
            "controller_runtime_reconcile_errors_total{controller=\"window\"} 0",
        );
        has(
            &out,
            "workqueue_depth{name=\"window\",controller=\"window\"} 0",
        );
        has(
            &out,
            "workqueue_adds_total{name=\"window\",controller=\"window\"} 0",
        );
        has(&out, "# TYPE controller_runtime_reconcile counter");
        has(&out, "# TYPE workqueue_depth gauge");
    }

    #[test]
    fn an_error_counts_in_both_families_and_a_delayed_requeue_is_requeue_after() {
        let m = ControllerRuntimeMetrics::default();
        let window = m.controller("window");
        let drain = m.controller("drain");
        let ok: Result<Action, ()> = Ok(Action::await_change());
        let later: Result<Action, ()> = Ok(Action::requeue(Duration::from_secs(1)));
        assert_eq!(result_of(&ok), "success");
        assert_eq!(result_of(&later), "requeue_after");
        assert_eq!(result_of(&Err::<Action, ()>(())), "error");
        window.reconciled(result_of(&ok));
        window.reconciled(result_of(&later));
        window.reconciled("error");
        drain.reconciled("success");
        let out = encoded(&m);
        for line in [
            "controller_runtime_reconcile_total{controller=\"window\",result=\"success\"} 1",
            "controller_runtime_reconcile_total{controller=\"window\",result=\"requeue_after\"} 1",
            "controller_runtime_reconcile_total{controller=\"window\",result=\"error\"} 1",
            "controller_runtime_reconcile_total{controller=\"window\",result=\"requeue\"} 0",
            "controller_runtime_reconcile_errors_total{controller=\"window\"} 1",
            "controller_runtime_reconcile_total{controller=\"drain\",result=\"success\"} 1",
            "controller_runtime_reconcile_errors_total{controller=\"drain\"} 0",
        ] {
            has(&out, line);
        }
    }

    #[test]
    fn a_key_added_again_before_it_is_taken_is_one_add() {
        let mut pending = Pending::default();
        assert!(pending.add("shop"));
        assert!(!pending.add("shop"));
        assert!(pending.add("cart"));
        assert_eq!(pending.depth(), 2);
        assert!(pending.take("shop"));
        assert_eq!(pending.depth(), 1);
        // Added while its reconcile runs: waits again, for one more reconcile.
        assert!(pending.add("shop"));
        assert_eq!(pending.depth(), 2);
    }

    #[test]
    fn a_requeue_whose_delay_ran_out_is_an_add_taken_at_once() {
        let m = ControllerRuntimeMetrics::default();
        let queue = m.work_queue("window");
        queue.added("shop");
        queue.added("shop");
        queue.added("cart");
        has(
            &encoded(&m),
            "workqueue_depth{name=\"window\",controller=\"window\"} 2",
        );
        queue.taken("shop");
        queue.taken("cart");
        // A requeue: nothing added it, kube's scheduler ran it when its delay ran out.
        queue.taken("shop");
        let out = encoded(&m);
        has(
            &out,
            "workqueue_depth{name=\"window\",controller=\"window\"} 0",
        );
        has(
            &out,
            "workqueue_adds_total{name=\"window\",controller=\"window\"} 3",
        );
    }
}
