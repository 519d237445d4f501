// Closes the window (runs even when the job failed or was cancelled), prints the report and
// writes it to the step summary. The runner runs this file; test tools such as
// @github/local-action require it and call `run`.
'use strict';
const {
  input, stepIO, call, durationMs, mdCell, summaryMarkdown, bearer,
} = require('./lib');

// Appends to the step summary, when the runner gives one; a summary that cannot be written is a
// warning, never a failed close.
async function summary(io, markdown) {
  try {
    await io.summary(markdown);
  } catch (err) {
    console.log(`::warning::disruption-guard: could not write the step summary (${err.message})`);
  }
}

// What main saw protected once the window was Ready; null when it went on without it.
function protectionAtOpen(io) {
  try {
    const saved = io.state('protection');
    return saved ? JSON.parse(saved) : null;
  } catch {
    return null;
  }
}

async function close(io) {
  // The `token` input, or a fresh id-token from the runner: the one main used may have expired.
  const token = bearer({ io, audience: input('audience') });
  // The window main opened, by its name: each leg of a matrix job has its own state.
  const name = io.state('window');
  const namespace = io.state('namespace');
  if (!name) {
    console.log('disruption-guard: no window was opened, nothing to close');
    return;
  }
  const server = input('server', true).replace(/\/$/, '');
  const url = `${server}/v1/namespaces/${encodeURIComponent(namespace)}/windows/${encodeURIComponent(name)}?wait=true`;
  let closed;
  try {
    closed = await call('DELETE', url, token, undefined,
      durationMs(input('retry-for') || '2m'));
  } catch (err) {
    await summary(io, `### disruption-guard: window ${mdCell(`${namespace}/${name}`)} was not closed\n\n`
      + `${mdCell(err.message)}. Its ttl ends it.\n`);
    throw err;
  }
  const report = closed.report || {};
  io.output('report', JSON.stringify(report));
  console.log(`disruption-guard: window ${namespace}/${name} closed`);
  console.log(JSON.stringify(report, null, 2));
  if ((report.podsDisrupted || 0) > 0) {
    console.log(`::warning::disruption-guard: ${report.podsDisrupted} protected pod(s) were disrupted during the window`);
  }
  await summary(io, summaryMarkdown(closed, protectionAtOpen(io)));
}

// The step: a failed close is a warning, never a failed clean-up; the window's TTL is the
// backstop.
async function run() {
  try {
    await close(stepIO());
  } catch (err) {
    console.log(`::warning::disruption-guard: closing the window failed (${err.message}); its TTL will end it`);
  }
}

module.exports = { run };

if (require.main === module) run();
