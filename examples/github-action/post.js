// Closes the window (runs even when the job failed or was cancelled), prints the report and
// writes it to the step summary.
'use strict';
const fs = require('fs');
const {
  input, call, durationMs, maskToken, mdCell, summaryMarkdown,
} = require('./lib');

// Appends to the step summary, when the runner gives one; a summary that cannot be written is a
// warning, never a failed close.
function summary(markdown) {
  const file = process.env.GITHUB_STEP_SUMMARY;
  if (!file) return;
  try {
    fs.appendFileSync(file, markdown);
  } catch (err) {
    console.log(`::warning::disruption-guard: could not write the step summary (${err.message})`);
  }
}

// What main saw protected once the window was Ready; null when it went on without it.
function protectionAtOpen() {
  try {
    return process.env.STATE_protection ? JSON.parse(process.env.STATE_protection) : null;
  } catch {
    return null;
  }
}

async function post() {
  maskToken();
  // The window main opened, by its name: each leg of a matrix job has its own state.
  const name = process.env.STATE_window;
  const namespace = process.env.STATE_namespace;
  if (!name) {
    console.log('disruption-guard: no window was opened, nothing to close');
    return;
  }
  const server = input('server', true).replace(/\/$/, '');
  const url = `${server}/v1/namespaces/${encodeURIComponent(namespace)}/windows/${encodeURIComponent(name)}?wait=true`;
  let closed;
  try {
    closed = await call('DELETE', url, input('token', true), undefined,
      durationMs(input('retry-for') || '2m'));
  } catch (err) {
    summary(`### disruption-guard: window ${mdCell(`${namespace}/${name}`)} was not closed\n\n`
      + `${mdCell(err.message)}. Its ttl ends it.\n`);
    throw err;
  }
  const report = closed.report || {};
  console.log(`disruption-guard: window ${namespace}/${name} closed`);
  console.log(JSON.stringify(report, null, 2));
  if ((report.podsDisrupted || 0) > 0) {
    console.log(`::warning::disruption-guard: ${report.podsDisrupted} protected pod(s) were disrupted during the window`);
  }
  summary(summaryMarkdown(closed, protectionAtOpen()));
}

post().catch((err) => {
  // The window's TTL is the backstop: warn, do not fail the job's clean-up.
  console.log(`::warning::disruption-guard: closing the window failed (${err.message}); its TTL will end it`);
});
