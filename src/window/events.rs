//! A window's part of a namespace's pass: its next status (decided by [`super::status`]),
//! written when it changed, and the Events and metrics of what changed: one Event per open
//! (`Opened`, carrying the `Ready` message when the window is Ready in the pass that opened it),
//! per later `Ready`, per renewal and per end, and a Warning `NoPodsSelected` when an open
//! window comes to select no pod; never one per pass.

use futures::{StreamExt, stream};
use jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::events::EventType;
use tracing::info;

use super::context::Context;
use super::error::Error;
use super::plan::{WindowPlan, World};
pub(super) use super::status::Decided;
use super::status::next_status;
use super::status_write::write_status;

use crate::resources::window_status::NO_PODS_SELECTED;
use crate::resources::{Phase, TestWindowStatus};

/// How many statuses of one pass are written at once.
const STATUS_CONCURRENCY: usize = 16;

/// Decides the status of the windows `which` (indexes into `decided` and `views`), writes those
/// that changed, and publishes their Events; each one's `previous` becomes what was written.
pub(super) async fn write_statuses(
    ctx: &Context,
    decided: &mut [Decided],
    views: &[WindowPlan],
    world: &World,
    which: &[usize],
    writes_ok: bool,
    now: Timestamp,
) -> Result<(), Error> {
    let writes: Vec<_> = which
        .iter()
        .filter_map(|&i| {
            let d = &decided[i];
            let status = next_status(d, &views[i], world, &ctx.signals, writes_ok, now);
            let window = d.window.clone();
            (status != d.previous).then_some(async move {
                let result = write_status(ctx, &window, &status).await;
                (i, status, result)
            })
        })
        .collect();
    let results: Vec<_> = stream::iter(writes)
        .buffered(STATUS_CONCURRENCY)
        .collect()
        .await;
    let mut failure = None;
    for (i, status, result) in results {
        if let Err(err) = result {
            failure = Some(err);
            continue;
        }
        let d = &mut decided[i];
        ctx.remember_status(&d.window, &status);
        events(ctx, d, &status, &views[i], now);
        d.previous = status;
    }
    failure.map_or(Ok(()), Err)
}

/// Records the metrics and logs of the change from `d.previous` to the `status` just written,
/// and publishes its Events ([`notes`]).
fn events(
    ctx: &Context,
    d: &Decided,
    status: &TestWindowStatus,
    plan: &WindowPlan,
    now: Timestamp,
) {
    let (window, previous, timing) = (&*d.window, &d.previous, &d.timing);
    let name = window.name_any();
    // What the report added to the node-seconds held, once: `previous` is what was written.
    let namespace = window.metadata.namespace.as_deref().unwrap_or_default();
    for (by, seconds) in status.report.held_node_seconds.each() {
        let added = seconds.saturating_sub(previous.report.held_node_seconds.get(by));
        ctx.metrics.held.add(namespace, by.as_str(), added as f64);
    }
    if previous.phase == Phase::Pending && status.phase == Phase::Active {
        info!(window = %name, expires_at = %timing.expires_at, "window opened");
    }
    if !previous.is_ready() && status.is_ready() {
        let latency = now.duration_since(timing.opened_at).as_secs_f64();
        if previous.ready_at.is_none() {
            ctx.metrics.ready_after(latency);
        }
        info!(window = %name, pods = plan.pods, nodes = plan.nodes, latency, "window ready");
    }
    if !previous.phase.is_final() && status.phase.is_final() {
        // The same transition as the Event, decided from the stored status: once per window,
        // also across a restart of the operator.
        if let Some((end, seconds)) = super::metrics::ended_window(status) {
            ctx.metrics.window_ended(end, seconds);
        }
        let phase = status.phase.as_str();
        info!(window = %name, phase, "window ended, releasing protection");
    }
    for (type_, reason, note) in notes(d, status, plan) {
        ctx.publish(window, type_, reason, note);
    }
}

/// The Events of the change from `d.previous` to `status`, in the order they are published:
/// type, reason and note.
fn notes(
    d: &Decided,
    status: &TestWindowStatus,
    plan: &WindowPlan,
) -> Vec<(EventType, &'static str, String)> {
    let (previous, timing) = (&d.previous, &d.timing);
    let mut notes = Vec::new();
    let message = status
        .ready_condition()
        .map(|c| c.message.as_str())
        .unwrap_or_default();
    let ready = !previous.is_ready() && status.is_ready();
    if previous.phase == Phase::Pending && status.phase == Phase::Active {
        let mut note = format!("open until {}", timing.expires_at);
        if let Some(by) = &d.window.spec.opened_by {
            note.push_str(&format!(", opened by {}", by.summary()));
        }
        // One Event per open: a window Ready in the pass that opened it says so in `Opened`.
        if ready {
            note.push_str(&format!("; {message}"));
        }
        notes.push((EventType::Normal, "Opened", note));
    } else if ready {
        notes.push((EventType::Normal, "Ready", message.to_string()));
    }
    if ready && !plan.foreign_values.is_empty() {
        let kept = plan.foreign_values.join(", ");
        let note = format!("left values set by others: {kept}");
        notes.push((EventType::Warning, "ValueKept", note));
    }
    if status.selects_no_pod() && !previous.selects_no_pod() {
        // Once as the window comes to select no pod (not per pass): a typo in a selector must
        // not read as protection.
        notes.push((EventType::Warning, NO_PODS_SELECTED, message.to_string()));
    }
    if timing.renewed {
        let note = format!("open until {}", timing.expires_at);
        notes.push((EventType::Normal, "Renewed", note));
    }
    if !previous.phase.is_final() && status.phase.is_final() {
        let r = &status.report;
        let note = format!(
            "ended, releasing protection; report: {} evictions blocked, {} pods disrupted, {} rollouts, {} nodes disrupted, {} node-seconds held",
            r.evictions_blocked,
            r.pods_disrupted,
            r.rollouts,
            r.nodes_disrupted.len(),
            r.held_node_seconds.total()
        );
        notes.push((EventType::Normal, status.phase.as_str(), note));
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::TestWindow;
    use crate::window::plan::WindowFacts;
    use crate::window::timing::Timing;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use std::sync::Arc;

    fn window(opened_by: Option<&str>) -> TestWindow {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "disruption-guard.io/v1alpha1", "kind": "TestWindow",
            "metadata": {"name": "w", "namespace": "shop"},
            "spec": {"ttl": "1h", "openedBy": opened_by.map(|name| serde_json::json!({"name": name}))}
        }))
        .unwrap()
    }

    fn timing() -> Timing {
        Timing {
            opened_at: "2026-01-01T10:00:00Z".parse().unwrap(),
            expires_at: "2026-01-01T11:00:00Z".parse().unwrap(),
            phase: Phase::Active,
            ended_at: None,
            renewed: false,
        }
    }

    /// A status in `phase` whose `Ready` condition has `ready` and `reason`.
    fn status(phase: Phase, ready: bool, reason: &str) -> TestWindowStatus {
        TestWindowStatus {
            phase,
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                reason: reason.into(),
                message: format!("{reason} message"),
                last_transition_time: Time(timing().opened_at),
                observed_generation: None,
            }],
            ..Default::default()
        }
    }

    fn reasons_and_notes(
        window: &TestWindow,
        previous: &TestWindowStatus,
        status: &TestWindowStatus,
    ) -> Vec<(&'static str, String)> {
        let d = Decided {
            window: Arc::new(window.clone()),
            timing: timing(),
            facts: WindowFacts::of(window, true, timing().expires_at),
            previous: previous.clone(),
        };
        notes(&d, status, &WindowPlan::default())
            .into_iter()
            .map(|(_, reason, note)| (reason, note))
            .collect()
    }

    #[test]
    fn a_window_ready_in_the_pass_that_opens_it_has_one_opened_event_saying_both() {
        let notes = reasons_and_notes(
            &window(Some("ci")),
            &TestWindowStatus::default(),
            &status(Phase::Active, true, "Protected"),
        );
        assert_eq!(
            notes,
            [(
                "Opened",
                "open until 2026-01-01T11:00:00Z, opened by ci; Protected message".to_string()
            )]
        );
    }

    #[test]
    fn a_window_ready_after_its_open_has_an_opened_then_a_ready_event() {
        let w = window(None);
        let protecting = status(Phase::Active, false, "Protecting");
        let opened = reasons_and_notes(&w, &TestWindowStatus::default(), &protecting);
        assert_eq!(
            opened,
            [("Opened", "open until 2026-01-01T11:00:00Z".to_string())]
        );
        let ready = status(Phase::Active, true, "Protected");
        let later = reasons_and_notes(&w, &protecting, &ready);
        assert_eq!(later, [("Ready", "Protected message".to_string())]);
        assert!(
            reasons_and_notes(&w, &ready, &ready).is_empty(),
            "none per pass"
        );
    }

    #[test]
    fn an_end_has_one_event_named_after_the_phase() {
        let w = window(None);
        let was = status(Phase::Active, true, "Protected");
        let ended = status(Phase::Closed, false, "Releasing");
        let notes = reasons_and_notes(&w, &was, &ended);
        assert_eq!(notes.len(), 1);
        assert_eq!(notes[0].0, "Closed");
        assert!(
            notes[0]
                .1
                .starts_with("ended, releasing protection; report: 0 evictions")
        );
    }
}
