//! A window's next status, decided from what one reconcile saw and did: its phase and times,
//! what it protects, the report, and the `Ready` condition (True once every piece of protection
//! it selects is in place: written by this pass or an earlier one, with reason `NoPodsSelected` when
//! it selects no pod; False with reason `Protecting`, `Releasing`, `Closed` or
//! `Expired` otherwise, or with the reason of a limit the window ran into: `NodeLimit`,
//! `DaemonSetsNotAllowed`). Pure: the reconcile writes what this returns.

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::plan::{self, WindowFacts, WindowPlan};
use super::timing::Timing;
use super::{held, report};
use crate::k8s::signals::Signal;
use crate::resources::window_status::{NO_PODS_SELECTED, READY};
use crate::resources::{Phase, ProtectedSummary, RELEASING, TestWindow, TestWindowStatus};

/// One window as this pass decided it: what its next status is decided from.
pub(super) struct Decided {
    pub window: Arc<TestWindow>,
    pub timing: Timing,
    pub facts: WindowFacts,
    /// The status last written.
    pub previous: TestWindowStatus,
}

/// The status of `d` after a reconcile that computed `plan` from `world` at `now`; `signals`
/// say which nodes are being disrupted (for the report); `writes_ok` says whether every write
/// of the plan succeeded.
pub(super) fn next_status(
    d: &Decided,
    plan: &WindowPlan,
    world: &plan::World,
    signals: &[Signal],
    writes_ok: bool,
    now: Timestamp,
) -> TestWindowStatus {
    let (previous, timing, view) = (&d.previous, &d.timing, &d.facts);
    let active = timing.phase == Phase::Active;
    let selected = active.then(|| plan::selected_pods(view, &world.pods));
    let (mut report, tracking, ended) = if let Some(selected) = &selected {
        let (report, mut tracking) = report::update(
            &previous.report,
            &previous.tracking,
            selected,
            world,
            signals,
        );
        let now_held = held::holds(selected, world, &view.protect, signals);
        let ended;
        (tracking.held, ended) = held::advance(&previous.tracking.held, &now_held, now);
        (report, tracking, ended)
    } else {
        // The window ended: every hold ends with it (once: the tracking is cleared here).
        let end = timing.ended_at.unwrap_or(now);
        let ended = held::close(&previous.tracking.held, end);
        (previous.report.clone(), Default::default(), ended)
    };
    for (by, seconds) in ended.each() {
        report.held_node_seconds.add(by, seconds);
    }
    let settled = plan.complete() && writes_ok;
    let (ready, reason, message) = match (timing.phase, &plan.refused) {
        // A limit refused (some of) what the window asks for: never Ready, whatever it holds.
        (Phase::Active, Some(refused)) => {
            let m = format!(
                "{}; {} pods, {} nodes protected",
                refused.message, plan.pods, plan.nodes
            );
            (false, refused.reason, m)
        }
        // Kept Ready (a window opened before a deploy is legitimate), saying it protects
        // nothing: a selector with a typo must not read as protection.
        (Phase::Active, None) if settled && selected.as_ref().is_some_and(Vec::is_empty) => {
            let m = format!(
                "no pod in {} matches the window's selector: nothing is protected until one does",
                view.namespace
            );
            (true, NO_PODS_SELECTED, m)
        }
        (Phase::Active, None) if settled => {
            let mut m = format!(
                "{} pods, {} nodes, {} PodDisruptionBudgets protected",
                plan.pods,
                plan.nodes,
                plan.pdbs.len()
            );
            if !plan.foreign_values.is_empty() {
                m.push_str(&format!(
                    "; kept values set by others: {}",
                    plan.foreign_values.join(", ")
                ));
            }
            (true, "Protected", m)
        }
        (Phase::Active, None) => {
            let mut m = format!("{} writes pending", plan.writes.len());
            if !plan.waiting.is_empty() {
                m.push_str(&format!("; waiting for {}", plan.waiting.join(", ")));
            }
            (false, "Protecting", m)
        }
        (phase, _) if settled => (false, phase.as_str(), "protection released".to_string()),
        _ => (
            false,
            RELEASING,
            format!("{} releases pending", plan.writes.len()),
        ),
    };
    let status_str = if ready { "True" } else { "False" };
    let generation = d.window.metadata.generation;
    let transition = match previous.ready_condition() {
        Some(c) if c.status == status_str => c.last_transition_time.clone(),
        _ => stamp(now),
    };
    let condition = Condition {
        type_: READY.into(),
        status: status_str.into(),
        reason: reason.into(),
        message: message.chars().take(1000).collect(),
        last_transition_time: transition,
        observed_generation: generation,
    };
    let protected = if active {
        ProtectedSummary {
            workloads: plan.workloads,
            pods: plan.pods,
            nodes: plan.nodes,
            pdbs: plan.pdbs.clone(),
            reused_pdbs: plan.reused_pdbs.clone(),
        }
    } else {
        ProtectedSummary::default()
    };
    report.peak_protected = report.peak_protected.with(&protected);
    let ready_at = previous.ready_at.clone();
    TestWindowStatus {
        phase: timing.phase,
        opened_at: Some(stamp(timing.opened_at)),
        ready_at: ready_at.or_else(|| ready.then(|| stamp(now))),
        expires_at: Some(stamp(timing.expires_at)),
        ended_at: timing.ended_at.map(stamp),
        protected,
        report,
        conditions: vec![condition],
        observed_generation: generation,
        tracking,
    }
}

/// A status timestamp, at the one-second precision `metav1.Time` is written with (so that a
/// status read back equals the status written).
fn stamp(t: Timestamp) -> Time {
    Time(Timestamp::from_second(t.as_second()).unwrap_or(t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Protect;
    use crate::window::plan::{Target, World, Write};

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn window() -> TestWindow {
        let mut w: TestWindow = serde_json::from_value(serde_json::json!({
            "apiVersion": "disruption-guard.io/v1alpha1", "kind": "TestWindow",
            "metadata": {"name": "w", "namespace": "shop", "uid": "u1", "generation": 2},
            "spec": {"ttl": "1h"}
        }))
        .unwrap();
        w.metadata.generation = Some(2);
        w
    }

    fn timing(phase: Phase) -> Timing {
        Timing {
            opened_at: at("2026-01-01T10:00:00Z"),
            expires_at: at("2026-01-01T11:00:00Z"),
            phase,
            ended_at: phase.is_final().then(|| at("2026-01-01T10:30:00Z")),
            renewed: false,
        }
    }

    fn facts(active: bool) -> WindowFacts {
        WindowFacts {
            uid: "u1".into(),
            namespace: "shop".into(),
            selector: Default::default(),
            protect: Protect::default(),
            active,
            expires_at: at("2026-01-01T11:00:00Z"),
            admitted: None,
        }
    }

    fn settled() -> WindowPlan {
        WindowPlan {
            workloads: 1,
            pods: 1,
            nodes: 1,
            pdbs: vec!["api-dg".into()],
            ..Default::default()
        }
    }

    fn pending() -> WindowPlan {
        WindowPlan {
            writes: vec![Write::Annotate {
                target: Target::Pod,
                name: "api-1".into(),
                uid: "p1".into(),
                manager: "disruption-guard/shop".into(),
                annotations: Default::default(),
            }],
            ..Default::default()
        }
    }

    /// A namespace with one running pod (the windows' empty selector selects it).
    fn one_pod() -> World {
        let pod: crate::resources::PodDigest = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "api-1", "namespace": "shop", "uid": "p1"},
            "spec": {"nodeName": "n1", "containers": []},
            "status": {"phase": "Running"}
        }))
        .unwrap();
        World {
            pods: vec![std::sync::Arc::new(pod)],
            ..Default::default()
        }
    }

    fn decide_in(
        world: &World,
        previous: &TestWindowStatus,
        phase: Phase,
        plan: &WindowPlan,
        ok: bool,
    ) -> TestWindowStatus {
        let now = at("2026-01-01T10:30:05Z");
        let d = Decided {
            window: Arc::new(window()),
            timing: timing(phase),
            facts: facts(phase == Phase::Active),
            previous: previous.clone(),
        };
        next_status(&d, plan, world, &[], ok, now)
    }

    fn decide(
        previous: &TestWindowStatus,
        phase: Phase,
        plan: &WindowPlan,
        ok: bool,
    ) -> TestWindowStatus {
        decide_in(&one_pod(), previous, phase, plan, ok)
    }

    fn ready(s: &TestWindowStatus) -> (&str, &str) {
        let c = s.ready_condition().expect("a Ready condition");
        (c.status.as_str(), c.reason.as_str())
    }

    #[test]
    fn an_active_window_is_ready_once_everything_is_written_and_seen() {
        let s = decide(&Default::default(), Phase::Active, &settled(), true);
        assert_eq!(ready(&s), ("True", "Protected"));
        assert_eq!((s.protected.pods, s.protected.nodes), (1, 1));
        assert_eq!(s.protected.pdbs, vec!["api-dg".to_string()]);
        assert!(s.ready_at.is_some());
        assert_eq!(s.observed_generation, Some(2));
    }

    #[test]
    fn an_active_window_with_writes_pending_or_failed_is_protecting() {
        let s = decide(&Default::default(), Phase::Active, &pending(), true);
        assert_eq!(ready(&s), ("False", "Protecting"));
        assert!(s.ready_at.is_none());
        let s = decide(&Default::default(), Phase::Active, &settled(), false);
        assert_eq!(ready(&s), ("False", "Protecting"));
    }

    #[test]
    fn a_window_a_limit_refused_is_not_ready_and_says_why_whatever_it_holds() {
        let refused = WindowPlan {
            refused: Some(crate::window::model::Refusal {
                reason: "NodeLimit",
                message: "the windows of this namespace hold 2 nodes".into(),
            }),
            ..settled()
        };
        let s = decide(&Default::default(), Phase::Active, &refused, true);
        assert_eq!(ready(&s), ("False", "NodeLimit"));
        let message = &s.ready_condition().unwrap().message;
        assert!(
            message.starts_with(
                "the windows of this namespace hold 2 nodes; 1 pods, 1 nodes protected"
            ),
            "{message}"
        );
        assert!(s.ready_at.is_none());
        assert_eq!((s.protected.pods, s.protected.nodes), (1, 1));
    }

    #[test]
    fn an_ended_window_is_releasing_until_its_release_is_done_then_says_so() {
        let was = decide(&Default::default(), Phase::Active, &settled(), true);
        let releasing = decide(&was, Phase::Closed, &pending(), false);
        assert_eq!(ready(&releasing), ("False", RELEASING));
        assert!(!releasing.is_released() && releasing.phase.is_final());
        assert_eq!(releasing.protected, ProtectedSummary::default());
        assert!(releasing.ended_at.is_some());
        let released = decide(&releasing, Phase::Closed, &WindowPlan::default(), true);
        assert_eq!(ready(&released), ("False", "Closed"));
        assert!(released.is_released());
        // Ready stayed False: its transition time is the one from when it left True.
        let t = |s: &TestWindowStatus| s.ready_condition().unwrap().last_transition_time.clone();
        assert_eq!(t(&released), t(&releasing));
        // The first Ready is remembered.
        assert_eq!(released.ready_at, was.ready_at);
    }

    #[test]
    fn a_window_that_selects_no_pod_is_ready_and_says_it_protects_nothing() {
        let nothing = WindowPlan::default();
        let s = decide_in(
            &World::default(),
            &Default::default(),
            Phase::Active,
            &nothing,
            true,
        );
        assert_eq!(ready(&s), ("True", NO_PODS_SELECTED));
        assert!(s.selects_no_pod() && s.is_ready());
        let message = &s.ready_condition().unwrap().message;
        assert!(message.starts_with("no pod in shop matches"), "{message}");
        // A pod appears: the same Ready, now protecting it; Ready never left True.
        let later = decide(&s, Phase::Active, &settled(), true);
        assert_eq!(ready(&later), ("True", "Protected"));
        let t = |s: &TestWindowStatus| s.ready_condition().unwrap().last_transition_time.clone();
        assert_eq!(t(&later), t(&s));
    }

    #[test]
    fn what_the_window_protected_at_most_survives_its_release() {
        let was = decide(&Default::default(), Phase::Active, &settled(), true);
        assert_eq!(
            (
                was.report.peak_protected.workloads,
                was.report.peak_protected.pods
            ),
            (1, 1)
        );
        let released = decide(&was, Phase::Closed, &WindowPlan::default(), true);
        assert_eq!(released.protected, ProtectedSummary::default());
        assert_eq!(released.report.peak_protected, was.report.peak_protected);
        assert_eq!(released.report.peak_protected.nodes, 1);
    }
}
