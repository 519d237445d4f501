//! One reconcile of one window: gather (from the caches) → decide (pure) → apply (writes) →
//! status and Events. Closing, expiry and deletion share the release path: the plan of a
//! window that is not Active wants nothing, so its writes remove what it added.

use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, stream};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use serde_json::json;
use tracing::{debug, info, warn};

use super::context::Context;
use super::error::{Error, is_code};
use super::plan::{self, WindowFacts, WindowPlan};
use super::timing::{self, Timing};
use super::{apply, report};
use crate::resources::names::{FIELD_MANAGER, FINALIZER};
use crate::resources::{Phase, ProtectedSummary, RELEASING, TestWindow, TestWindowStatus};

/// Set once the operator has warned that the installed CRD lacks status fields.
static OLD_CRD_WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// How many writes of one window run at once.
const WRITE_CONCURRENCY: usize = 16;

/// Reconciles a window; failures become a Warning Event, a metric and a requeue.
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
    let result = reconcile_window(&window, &ctx).await;
    if let Err(err) = &result {
        ctx.metrics.error(err.category());
        warn!(window = %window.name_any(), namespace = %ns, category = err.category(), error = %err, "reconcile failed");
        ctx.publish(
            &window,
            EventType::Warning,
            "ReconcileFailed",
            err.to_string(),
        )
        .await;
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

async fn reconcile_window(window: &TestWindow, ctx: &Context) -> Result<Action, Error> {
    let now = Timestamp::now();
    let args = &ctx.args;
    let timing = timing::decide(window, now, args.max_ttl_signed());
    let has_finalizer = window.finalizers().iter().any(|f| f == FINALIZER);
    let deleting = window.metadata.deletion_timestamp.is_some();
    if deleting && !has_finalizer {
        return Ok(Action::await_change());
    }
    if !deleting && !has_finalizer {
        add_finalizer(window, ctx).await?;
    }
    if !deleting && timing::retention_over(&timing, now, args.retention_signed()) {
        info!(window = %window.name_any(), "deleting ended window after its retention");
        ctx.windows(window)
            .delete(&window.name_any(), &DeleteParams::background())
            .await
            .map_err(Error::Delete)?;
        return Ok(Action::await_change());
    }

    let view = WindowFacts::of(window, timing.phase == Phase::Active, timing.expires_at);
    let world = if deleting {
        ctx.fresh_world(&view.namespace)
            .await
            .map_err(|source| Error::Write {
                what: "a fresh view of the namespace".into(),
                source,
            })?
    } else {
        ctx.world(&view.namespace)
    };
    let plan = plan::plan(&view, &world);
    let previous = ctx.previous_status(window);

    // The end is recorded before the release (docs/windows.md, "Lifecycle"): whoever watches
    // the window sees it ended, `Ready` False for `Releasing`, before any protection goes, so a
    // window whose status says Active always protects what it selects.
    let ending = !deleting && timing.phase.is_final() && !previous.phase.is_final();
    let recorded_end = if ending && !plan.complete() {
        let status = next_status(window, &previous, &timing, &view, &plan, &world, false, now);
        write_status(window, ctx, &status).await?;
        ctx.remember_status(window, &status);
        events(window, ctx, &previous, &status, &timing, &plan, now).await;
        Some(status)
    } else {
        None
    };

    let started = std::time::Instant::now();
    let failure = write_all(ctx, &view, &plan).await;
    ctx.metrics.reconciled(plan.writes.len());
    debug!(
        window = %view.name,
        writes = plan.writes.len(),
        waiting = plan.waiting.len(),
        write_ms = started.elapsed().as_millis() as u64,
        "planned and wrote"
    );

    if deleting {
        if let Some(err) = failure {
            return Err(err);
        }
        ctx.forget(window);
        remove_finalizer(window, ctx).await?;
        return Ok(Action::await_change());
    }

    let status = next_status(
        window,
        &previous,
        &timing,
        &view,
        &plan,
        &world,
        failure.is_none(),
        now,
    );
    let last_written = recorded_end.as_ref().unwrap_or(&previous);
    if status != *last_written {
        write_status(window, ctx, &status).await?;
        ctx.remember_status(window, &status);
    }
    if recorded_end.is_none() {
        events(window, ctx, &previous, &status, &timing, &plan, now).await;
    }
    if let Some(err) = failure {
        return Err(err);
    }
    Ok(requeue(&timing, &plan, now, args.retention_signed()))
}

/// Writes the status by server-side apply. When the installed CRD is older than this
/// operator (a field of the status is not in its schema, e.g. after an upgrade: Helm never
/// upgrades CRDs), apply is refused as a whole; the status is then replaced instead, so the
/// API server prunes the unknown fields and the rest of the status is still written.
async fn write_status(
    window: &TestWindow,
    ctx: &Context,
    status: &TestWindowStatus,
) -> Result<(), Error> {
    let api = ctx.windows(window);
    let body = json!({
        "apiVersion": "disruption-guard.io/v1alpha1",
        "kind": "TestWindow",
        "status": status,
    });
    let applied = api
        .patch_status(
            &window.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await;
    match applied {
        Err(kube::Error::Api(s)) if s.message.contains("field not declared in schema") => {
            if !OLD_CRD_WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
                warn!(
                    message = %s.message,
                    "the installed TestWindow CRD is older than this operator; status fields it lacks are dropped: run `disruption-guard crd | kubectl apply --server-side -f -`"
                );
            }
            let mut last = None;
            for _ in 0..3 {
                let mut next = api
                    .get_status(&window.name_any())
                    .await
                    .map_err(Error::Status)?;
                next.status = Some(status.clone());
                next.metadata.managed_fields = None;
                match api
                    .replace_status(&window.name_any(), &PostParams::default(), &next)
                    .await
                {
                    Err(e) if is_code(&e, 409) => last = Some(e),
                    other => return other.map(drop).map_err(Error::Status),
                }
            }
            Err(Error::Status(last.expect("three conflicts")))
        }
        other => other.map(drop).map_err(Error::Status),
    }
}

async fn write_all(ctx: &Context, view: &WindowFacts, plan: &WindowPlan) -> Option<Error> {
    let manager = apply::manager_of(view);
    let results: Vec<Result<(), Error>> = stream::iter(plan.writes.clone())
        .map(|w| {
            let (writer, view, manager) = (ctx.writer.clone(), view.clone(), manager.clone());
            async move { writer.write(&view, &manager, &w).await }
        })
        .buffer_unordered(WRITE_CONCURRENCY)
        .collect()
        .await;
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

#[allow(clippy::too_many_arguments)]
fn next_status(
    window: &TestWindow,
    previous: &TestWindowStatus,
    timing: &Timing,
    view: &WindowFacts,
    plan: &WindowPlan,
    world: &plan::World,
    writes_ok: bool,
    now: Timestamp,
) -> TestWindowStatus {
    let active = timing.phase == Phase::Active;
    let (report, tracking) = if active {
        let selected = plan::selected_pods(view, &world.pods);
        report::update(&previous.report, &previous.tracking, &selected, world)
    } else {
        (previous.report.clone(), Default::default())
    };
    let (ready, reason, message) = match timing.phase {
        Phase::Active if plan.complete() && writes_ok => {
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
        Phase::Active => {
            let mut m = format!("{} writes pending", plan.writes.len());
            if !plan.waiting.is_empty() {
                m.push_str(&format!("; waiting for {}", plan.waiting.join(", ")));
            }
            (false, "Protecting", m)
        }
        phase if plan.complete() && writes_ok => {
            (false, phase.as_str(), "protection released".to_string())
        }
        _ => (
            false,
            RELEASING,
            format!("{} releases pending", plan.writes.len()),
        ),
    };
    let status_str = if ready { "True" } else { "False" };
    let old = previous.conditions.iter().find(|c| c.type_ == "Ready");
    let generation = window.metadata.generation;
    let transition = match old {
        Some(c) if c.status == status_str => c.last_transition_time.clone(),
        _ => stamp(now),
    };
    let condition = Condition {
        type_: "Ready".into(),
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
    let ready_at = previous
        .ready_at
        .clone()
        .or_else(|| ready.then_some(stamp(now)));
    TestWindowStatus {
        phase: timing.phase,
        opened_at: Some(stamp(timing.opened_at)),
        ready_at,
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

async fn events(
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
    if was == Phase::Pending && status.phase == Phase::Active {
        info!(window = %name, expires_at = %timing.expires_at, "window opened");
        let note = format!("open until {}", timing.expires_at);
        ctx.publish(window, EventType::Normal, "Opened", note).await;
    }
    if !previous.is_ready() && status.is_ready() {
        let latency = now.duration_since(timing.opened_at).as_secs_f64();
        if previous.ready_at.is_none() {
            ctx.metrics.ready_after(latency);
        }
        info!(window = %name, pods = plan.pods, nodes = plan.nodes, latency, "window ready");
        let note = status.conditions[0].message.clone();
        ctx.publish(window, EventType::Normal, "Ready", note).await;
        if !plan.foreign_values.is_empty() {
            let note = format!(
                "left values set by others: {}",
                plan.foreign_values.join(", ")
            );
            ctx.publish(window, EventType::Warning, "ValueKept", note)
                .await;
        }
    }
    if timing.renewed {
        let note = format!("open until {}", timing.expires_at);
        ctx.publish(window, EventType::Normal, "Renewed", note)
            .await;
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
            "ended, releasing protection; report: {} evictions blocked, {} pods disrupted, {} rollouts, {} nodes disrupted",
            r.evictions_blocked,
            r.pods_disrupted,
            r.rollouts,
            r.nodes_disrupted.len()
        );
        ctx.publish(window, EventType::Normal, reason, note).await;
    }
}

async fn add_finalizer(window: &TestWindow, ctx: &Context) -> Result<(), Error> {
    let mut finalizers = window.finalizers().to_vec();
    finalizers.push(FINALIZER.to_string());
    let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": window.resource_version()}});
    ctx.windows(window)
        .patch(
            &window.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map(drop)
        .map_err(Error::Finalizer)
}

async fn remove_finalizer(window: &TestWindow, ctx: &Context) -> Result<(), Error> {
    let finalizers: Vec<&String> = window
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .collect();
    let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": window.resource_version()}});
    match ctx
        .windows(window)
        .patch(
            &window.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Err(e) if is_code(&e, 404) => Ok(()),
        other => other.map(drop).map_err(Error::Finalizer),
    }
}
