//! One reconcile of one window: gather (from the caches) → decide (pure: [`super::plan`],
//! [`super::status`]) → apply (writes) → status and Events. Closing, expiry and deletion share
//! the release path: the plan of a window that is not Active wants nothing, so its writes
//! remove what it added.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, stream};
use jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use kube::api::DeleteParams;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{self, Event as FinalizerEvent, finalizer};
use tracing::{debug, info, warn};

use super::apply;
use super::context::Context;
use super::error::Error;
use super::limits;
use super::plan::{self, WindowFacts, WindowPlan};
use super::settling;
use super::status::next_status;
use super::status_write::write_status;
use super::timing::{self, Timing};
use crate::resources::names::FINALIZER;
use crate::resources::{Phase, TestWindow, TestWindowStatus};

/// How many writes of one window run at once.
const WRITE_CONCURRENCY: usize = 16;

/// Reconciles a window; failures become a Warning Event, a metric and a requeue. Reconciles the
/// gates above turn away (out of scope, caches loading, not the leader) are not timed: they do
/// nothing.
pub async fn reconcile(window: Arc<TestWindow>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = window.namespace().unwrap_or_default();
    if !ctx.runtime.in_scope(&ns) {
        return Ok(Action::await_change());
    }
    if !ctx.synced() {
        return Ok(Action::requeue(Duration::from_millis(200)));
    }
    // Only the Lease holder writes; a follower looks again soon, so a takeover acts at once.
    if !ctx.runtime.leader.is_leader() {
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    // The namespace's pods are cached from its first window on; its first reconcile waits for
    // their list.
    if !ctx.pods_synced(&ns).await {
        return Ok(Action::requeue(Duration::from_millis(200)));
    }
    let started = Instant::now();
    let result = reconcile_window(window.clone(), &ctx).await;
    ctx.metrics
        .reconcile_durations
        .observe(result.is_ok(), started.elapsed());
    if let Err(err) = &result {
        ctx.metrics.error(err.category());
        warn!(window = %window.name_any(), namespace = %ns, category = err.category(), error = %err, "reconcile failed");
        ctx.publish(
            &window,
            EventType::Warning,
            "ReconcileFailed",
            err.to_string(),
        );
    }
    result
}

/// The requeue after a failure: quick for conflicts, slower for the rest.
pub fn error_policy(_window: Arc<TestWindow>, err: &Error, _ctx: Arc<Context>) -> Action {
    if err.is_conflict() {
        Action::requeue(Duration::from_millis(100))
    } else {
        Action::requeue(Duration::from_secs(2))
    }
}

/// The finalizer (`disruption-guard.io/cleanup`, kept by `kube::runtime::finalizer`) holds a
/// deleted window until its release is done.
async fn reconcile_window(window: Arc<TestWindow>, ctx: &Context) -> Result<Action, Error> {
    let api = ctx.windows(&window);
    finalizer(&api, FINALIZER, window, |event| async move {
        match event {
            FinalizerEvent::Apply(window) => keep(&window, ctx).await,
            FinalizerEvent::Cleanup(window) => release_deleted(&window, ctx).await,
        }
    })
    .await
    .map_err(|err| match err {
        finalizer::Error::ApplyFailed(err) | finalizer::Error::CleanupFailed(err) => err,
        finalizer::Error::AddFinalizer(err) | finalizer::Error::RemoveFinalizer(err) => {
            Error::Finalizer(err)
        }
        finalizer::Error::UnnamedObject | finalizer::Error::InvalidFinalizer => {
            Error::FinalizerPatch(err.to_string())
        }
    })
}

/// A window that exists: protect it while Active, record its end, release, report, and delete
/// it once its retention is over.
async fn keep(window: &TestWindow, ctx: &Context) -> Result<Action, Error> {
    let now = Timestamp::now();
    let args = &ctx.args;
    let timing = timing::decide(window, now, args.max_ttl_signed());
    if timing::retention_over(&timing, now, args.retention_signed()) {
        info!(window = %window.name_any(), "deleting ended window after its retention");
        ctx.windows(window)
            .delete(&window.name_any(), &DeleteParams::background())
            .await
            .map_err(Error::Delete)?;
        return Ok(Action::await_change());
    }

    let mut view = WindowFacts::of(window, timing.phase == Phase::Active, timing.expires_at);
    let world = ctx.world(&view.namespace);
    let refused = if view.active {
        let namespace_windows = ctx.windows_in(&view.namespace);
        limits::restrict(window, &mut view, &namespace_windows, &world, args, now)
    } else {
        None
    };
    let mut plan = plan::plan(&view, &world);
    plan.refused = refused;
    ctx.hold_back(&view.uid, &mut plan, &world);
    let previous = ctx.previous_status(window);
    if previous.ready_at.is_none() {
        let signals = &ctx.signals;
        let moving = settling::unsettled(&view, &world, signals, timing.opened_at, now);
        plan.waiting.extend(moving);
    }

    // The end is recorded before the release (docs/windows.md, "Lifecycle"): whoever watches
    // the window sees it ended, `Ready` False for `Releasing`, before any protection goes, so a
    // window whose status says Active always protects what it selects.
    let ending = timing.phase.is_final() && !previous.phase.is_final();
    let recorded_end = if ending && !plan.complete() {
        let signals = &ctx.signals;
        let status = next_status(
            window, &previous, &timing, &view, &plan, &world, signals, false, now,
        );
        write_status(ctx, window, &status).await?;
        ctx.remember_status(window, &status);
        events(window, ctx, &previous, &status, &timing, &plan, now);
        Some(status)
    } else {
        None
    };

    let failure = write_planned(ctx, &view, &plan).await;
    let status = next_status(
        window,
        &previous,
        &timing,
        &view,
        &plan,
        &world,
        &ctx.signals,
        failure.is_none(),
        now,
    );
    // A window's first protection goes out before its first status: the reconcile that the
    // writes' echo wakes writes it, `Ready` at once when nothing else is awaited. A status
    // "Protecting" in between would put one more write on every opening's way to `Ready`.
    if opening(&previous, &status, &plan, failure.is_none()) {
        return Ok(requeue(&timing, &plan, now, args.retention_signed()));
    }
    let last_written = recorded_end.as_ref().unwrap_or(&previous);
    if status != *last_written {
        write_status(ctx, window, &status).await?;
        ctx.remember_status(window, &status);
    }
    if recorded_end.is_none() {
        events(window, ctx, &previous, &status, &timing, &plan, now);
    }
    if let Some(err) = failure {
        return Err(err);
    }
    Ok(requeue(&timing, &plan, now, args.retention_signed()))
}

/// Whether this reconcile wrote a window's first protection (or waits to see it back), all of
/// it successfully, and its status would only say it is not ready yet.
fn opening(
    previous: &TestWindowStatus,
    status: &TestWindowStatus,
    plan: &WindowPlan,
    writes_ok: bool,
) -> bool {
    previous.phase == Phase::Pending
        && status.phase == Phase::Active
        && !status.is_ready()
        && (!plan.writes.is_empty() || plan.unseen > 0)
        && writes_ok
}

/// A window being deleted: its release is planned from a fresh read of the namespace (a write
/// the caches have not seen yet is not left behind); once written, the finalizer goes.
async fn release_deleted(window: &TestWindow, ctx: &Context) -> Result<Action, Error> {
    let timing = timing::decide(window, Timestamp::now(), ctx.args.max_ttl_signed());
    let view = WindowFacts::of(window, false, timing.expires_at);
    let world = ctx
        .fresh_world(&view.namespace)
        .await
        .map_err(|source| Error::Write {
            what: "a fresh view of the namespace".into(),
            source,
        })?;
    let plan = plan::plan(&view, &world);
    if let Some(err) = write_planned(ctx, &view, &plan).await {
        return Err(err);
    }
    ctx.forget(window);
    Ok(Action::await_change())
}

/// Makes the plan's writes, counted and timed; the first failure, if any.
async fn write_planned(ctx: &Context, view: &WindowFacts, plan: &WindowPlan) -> Option<Error> {
    let started = Instant::now();
    let failure = write_all(ctx, view, plan).await;
    ctx.metrics.reconciled(plan.writes.len());
    debug!(
        window = %view.name,
        writes = plan.writes.len(),
        waiting = plan.waiting.len(),
        write_ms = started.elapsed().as_millis() as u64,
        "planned and wrote"
    );
    failure
}

/// Makes the writes in parallel; remembers those that succeeded until they are seen back.
async fn write_all(ctx: &Context, view: &WindowFacts, plan: &WindowPlan) -> Option<Error> {
    let manager = apply::manager_of(view);
    let results: Vec<Result<Option<String>, Error>> = stream::iter(plan.writes.clone())
        .map(|w| {
            let (writer, view, manager) = (ctx.writer.clone(), view.clone(), manager.clone());
            async move { writer.write(&view, &manager, &w).await }
        })
        .buffered(WRITE_CONCURRENCY)
        .collect()
        .await;
    let versions: Vec<Option<String>> = results
        .iter()
        .map(|r| r.as_ref().ok().cloned().flatten())
        .collect();
    ctx.wrote(&view.uid, &plan.writes, &versions);
    results.into_iter().find_map(Result::err)
}

fn requeue(
    timing: &Timing,
    plan: &WindowPlan,
    now: Timestamp,
    retention: SignedDuration,
) -> Action {
    if !plan.complete() {
        return Action::requeue(Duration::from_secs(1));
    }
    // A limit may let go once other windows end: looked at again soon.
    if plan.refused.is_some() {
        return Action::requeue(Duration::from_secs(5));
    }
    let until = |t: Timestamp| {
        let d = t.duration_since(now).max(SignedDuration::from_millis(50));
        Duration::try_from(d)
            .unwrap_or(Duration::from_secs(60))
            .min(Duration::from_secs(300))
    };
    match timing.phase {
        Phase::Active => Action::requeue(until(timing.expires_at).min(Duration::from_secs(60))),
        _ => {
            let end = timing.ended_at.unwrap_or(now);
            Action::requeue(until(
                end.saturating_add(retention).unwrap_or(Timestamp::MAX),
            ))
        }
    }
}

fn events(
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
