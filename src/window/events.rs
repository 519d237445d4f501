//! A window's part of a namespace's pass: its next status (decided by [`super::status`]),
//! written when it changed, and the Events and metrics of what changed: one Event per open,
//! per `Ready`, per renewal and per end, and a Warning `NoPodsSelected` when an open window
//! comes to select no pod; never one per pass.

use futures::future::join_all;
use jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::events::EventType;
use tracing::info;

use super::context::Context;
use super::error::Error;
use super::plan::{WindowFacts, WindowPlan, World};
use super::status::next_status;
use super::status_write::write_status;
use super::timing::Timing;
use std::sync::Arc;

use crate::resources::window_status::NO_PODS_SELECTED;
use crate::resources::{Phase, TestWindow, TestWindowStatus};

/// One window as this pass decided it.
pub(super) struct Decided {
    pub window: Arc<TestWindow>,
    pub timing: Timing,
    pub facts: WindowFacts,
    pub previous: TestWindowStatus,
}

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
    let next: Vec<(usize, TestWindowStatus)> = which
        .iter()
        .map(|&i| {
            let d = &decided[i];
            let status = next_status(
                &d.window,
                &d.previous,
                &d.timing,
                &d.facts,
                &views[i],
                world,
                &ctx.signals,
                writes_ok,
                now,
            );
            (i, status)
        })
        .filter(|(i, status)| *status != decided[*i].previous)
        .collect();
    let mut results: Vec<(usize, Result<(), Error>)> = Vec::with_capacity(next.len());
    for chunk in next.chunks(STATUS_CONCURRENCY) {
        let writes = chunk.iter().map(|(i, status)| {
            let window = &decided[*i].window;
            async move { (*i, write_status(ctx, window, status).await) }
        });
        results.extend(join_all(writes).await);
    }
    let mut failure = None;
    let mut written = std::collections::BTreeSet::new();
    for (i, result) in results {
        match result {
            Ok(()) => {
                written.insert(i);
            }
            Err(err) => failure = Some(err),
        }
    }
    for (i, status) in next.into_iter().filter(|(i, _)| written.contains(i)) {
        let d = &mut decided[i];
        ctx.remember_status(&d.window, &status);
        events(
            &d.window,
            ctx,
            &d.previous,
            &status,
            &d.timing,
            &views[i],
            now,
        );
        d.previous = status;
    }
    failure.map_or(Ok(()), Err)
}

pub(super) fn events(
    window: &TestWindow,
    ctx: &Context,
    previous: &TestWindowStatus,
    status: &TestWindowStatus,
    timing: &Timing,
    plan: &WindowPlan,
    now: Timestamp,
) {
    let name = window.name_any();
    let was = previous.phase;
    // What the report added to the node-seconds held, once: `previous` is what was written.
    let namespace = window.metadata.namespace.as_deref().unwrap_or_default();
    for (by, seconds) in status.report.held_node_seconds.each() {
        let added = seconds.saturating_sub(previous.report.held_node_seconds.get(by));
        ctx.metrics.held.add(namespace, by.as_str(), added as f64);
    }
    if was == Phase::Pending && status.phase == Phase::Active {
        info!(window = %name, expires_at = %timing.expires_at, "window opened");
        let note = match &window.spec.opened_by {
            Some(by) => format!(
                "open until {}, opened by {}",
                timing.expires_at,
                by.summary()
            ),
            None => format!("open until {}", timing.expires_at),
        };
        ctx.publish(window, EventType::Normal, "Opened", note);
    }
    if !previous.is_ready() && status.is_ready() {
        let latency = now.duration_since(timing.opened_at).as_secs_f64();
        if previous.ready_at.is_none() {
            ctx.metrics.ready_after(latency);
        }
        info!(window = %name, pods = plan.pods, nodes = plan.nodes, latency, "window ready");
        let note = status.conditions[0].message.clone();
        ctx.publish(window, EventType::Normal, "Ready", note);
        if !plan.foreign_values.is_empty() {
            let note = format!(
                "left values set by others: {}",
                plan.foreign_values.join(", ")
            );
            ctx.publish(window, EventType::Warning, "ValueKept", note);
        }
    }
    if status.selects_no_pod() && !previous.selects_no_pod() {
        // Once as the window comes to select no pod (not per pass): a typo in a selector must
        // not read as protection.
        let note = status
            .ready_condition()
            .map(|c| c.message.clone())
            .unwrap_or_default();
        ctx.publish(window, EventType::Warning, NO_PODS_SELECTED, note);
    }
    if timing.renewed {
        let note = format!("open until {}", timing.expires_at);
        ctx.publish(window, EventType::Normal, "Renewed", note);
    }
    if !was.is_final() && status.phase.is_final() {
        // The same transition as the Event, decided from the stored status: once per window,
        // also across a restart of the operator.
        if let Some((end, seconds)) = super::metrics::ended_window(status) {
            ctx.metrics.window_ended(end, seconds);
        }
        let reason = status.phase.as_str();
        info!(window = %name, phase = reason, "window ended, releasing protection");
        let r = &status.report;
        let note = format!(
            "ended, releasing protection; report: {} evictions blocked, {} pods disrupted, {} rollouts, {} nodes disrupted, {} node-seconds held",
            r.evictions_blocked,
            r.pods_disrupted,
            r.rollouts,
            r.nodes_disrupted.len(),
            r.held_node_seconds.total()
        );
        ctx.publish(window, EventType::Normal, reason, note);
    }
}
