// An application built on the official MCP TypeScript SDK client, driven by
// the Go tests in package clients against the real mcp-backend binary.
//
//   node ts-client.mjs SCENARIO
//
// The server is MCP_URL (Streamable HTTP, bearer token MCP_TOKEN if set) or
// MCP_STDIO (a JSON array: the command and its arguments). SCRATCH is a
// directory the scenario may write to. The last stdout line is a JSON
// report; the process exits non-zero when the scenario found a problem.
// Scenario "restart" prints {"event":"restart-me"} mid-way and waits for a
// line on stdin that says the backend was restarted.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { createInterface } from 'node:readline';

const scenario = process.argv[2];
const scratch = process.env.SCRATCH;
const problems = [];
const report = { scenario, transport: process.env.MCP_URL ? 'http' : 'stdio' };

function problem(msg) {
  problems.push(msg);
}

function transport(token) {
  if (process.env.MCP_URL) {
    const headers = token ? { Authorization: `Bearer ${token}` } : {};
    return new StreamableHTTPClientTransport(new URL(process.env.MCP_URL), { requestInit: { headers } });
  }
  const [command, ...args] = JSON.parse(process.env.MCP_STDIO);
  return new StdioClientTransport({ command, args, stderr: 'inherit' });
}

// connect returns a client that knows the tools, so callTool validates every
// structuredContent against the tool's outputSchema.
async function connect(token = process.env.MCP_TOKEN) {
  const client = new Client({ name: 'mcp-backend-tests', version: '1.0.0' });
  await client.connect(transport(token));
  const { tools } = await client.listTools();
  return { client, tools };
}

// envelope is the error a failed result carries: the JSON text content, and
// the same in _meta.
function envelope(res) {
  const text = res.content?.find((c) => c.type === 'text')?.text ?? '';
  let env;
  try {
    env = JSON.parse(text);
  } catch {
    return { code: 'NOT_JSON', text };
  }
  const meta = res._meta?.['mcp-backend/error'];
  if (JSON.stringify(meta) !== JSON.stringify(env)) {
    problem(`_meta envelope ${JSON.stringify(meta)} differs from the text ${text}`);
  }
  if (res.structuredContent !== undefined) {
    problem(`error result carries structuredContent ${JSON.stringify(res.structuredContent)}`);
  }
  return env.error ?? { code: 'NO_ENVELOPE', text };
}

// call runs a tool and returns {ok, code, retryable, result} or {threw}.
async function call(client, name, args, options) {
  try {
    const res = await client.callTool({ name, arguments: args }, undefined, options);
    if (!res.isError) return { ok: true, result: res.structuredContent };
    const e = envelope(res);
    return { ok: false, code: e.code, retryable: e.retryable, message: e.message };
  } catch (err) {
    return { threw: `${err.name}: ${err.message}` };
  }
}

async function waitFor(what, cond, ms = 20000) {
  const deadline = performance.now() + ms;
  for (;;) {
    const v = cond();
    if (v) return v;
    if (performance.now() > deadline) throw new Error(`gave up waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

function readPid(file) {
  if (!existsSync(file)) return 0;
  const n = parseInt(readFileSync(file, 'utf8'), 10);
  return Number.isNaN(n) ? 0 : n;
}

function groupAlive(pgid) {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch (err) {
    return err.code !== 'ESRCH';
  }
}

// sleeper is a shell.exec command whose process group leader is a sleep
// that wrote its pid (= the group id) to file.
function sleeper(file, secs) {
  return `echo $$ > ${file}; exec sleep ${secs}`;
}

async function shellActive(client) {
  const r = await call(client, 'system.info', {});
  return r.ok ? r.result.admission.active.shell : -1;
}

const scenarios = {
  // Every tool succeeds as the client validates it.
  async tools() {
    const { client, tools } = await connect();
    report.tools = tools.map((t) => t.name).sort();
    const file = join(scratch, 'hello.txt');
    const victim = spawn('sleep', ['60'], { stdio: 'ignore' });
    const cases = [
      ['system.info', {}],
      ['process.list', { limit: 5 }],
      ['shell.exec', { command: 'echo hi', timeoutMs: 5000 }],
      ['file.write', { path: file, content: 'hello' }],
      ['file.read', { path: file, offset: 0, length: 5 }],
      ['file.list', { path: scratch, limit: 10 }],
      ['process.kill', { pid: victim.pid, signal: 'TERM' }],
      ['service.status', { unit: 'mcp-backend-absent.service' }],
      ['service.control', { unit: 'mcp-backend-absent.service', action: 'stop' }],
    ];
    report.calls = {};
    for (const [name, args] of cases) {
      const r = await call(client, name, args);
      report.calls[name] = r.ok ? 'ok' : (r.code ?? r.threw);
      if (r.threw) problem(`${name} threw ${r.threw}`);
    }
    if (report.calls['shell.exec'] === 'ok') {
      const r = await call(client, 'shell.exec', { command: 'printf abc' });
      if (r.result?.stdout !== 'abc') problem(`shell.exec stdout ${JSON.stringify(r.result)}`);
    }
    // The job tools, each validated against its outputSchema.
    const started = await call(client, 'job.start', { command: 'printf job; sleep 30', idempotencyKey: 'ts-tools' });
    report.calls['job.start'] = started.ok ? 'ok' : (started.code ?? started.threw);
    const id = started.result?.job?.id;
    for (const [name, args] of [
      ['job.status', { id }],
      ['job.output', { id, stream: 'stdout', offset: 0 }],
      ['job.wait', { id, waitMs: 100 }],
      ['job.list', {}],
      ['job.cancel', { id }],
    ]) {
      const r = await call(client, name, args);
      report.calls[name] = r.ok ? 'ok' : (r.code ?? r.threw);
      if (r.threw) problem(`${name} threw ${r.threw}`);
    }
    victim.kill('SIGKILL');
    await client.close();
  },

  // Each error code that can be provoked reaches the application as a
  // result with isError and the code.
  async errors() {
    const { client } = await connect();
    const seen = {};
    const expect = async (code, name, args, options) => {
      const r = await call(client, name, args, options);
      seen[code] = r.ok ? 'ok' : (r.code ?? `threw ${r.threw}`);
      if (r.threw) problem(`${code}: ${name} threw ${r.threw}`);
      else if (r.code !== code) problem(`${code}: ${name} gave ${JSON.stringify(r)}`);
      else if (r.retryable !== ['OVERLOADED', 'UNAVAILABLE', 'TIMEOUT'].includes(code)) problem(`${code}: retryable ${r.retryable}`);
      return r;
    };
    await expect('INVALID_ARGUMENT', 'shell.exec', { command: '' });
    await expect('INVALID_ARGUMENT', 'shell.exec', { command: 'true', timeoutMs: 0 });
    await expect('NOT_FOUND', 'file.read', { path: join(scratch, 'missing') });
    await expect('PERMISSION_DENIED', 'process.kill', { pid: 1 });
    // The backend runs with a small response budget: a long listing of
    // short names cannot be trimmed to fit.
    await expect('OUTPUT_LIMIT', 'file.list', { path: process.env.BIG_DIR, limit: 10000 });

    // The one shell slot taken and no queue: the next shell call is refused.
    const pidFile = join(scratch, 'holder.pid');
    let holderId;
    const send = client.transport.send.bind(client.transport);
    client.transport.send = (msg, opts) => {
      if (msg.method === 'tools/call' && msg.params?.name === 'shell.exec' && holderId === undefined) holderId = msg.id;
      return send(msg, opts);
    };
    const holder = call(client, 'shell.exec', { command: sleeper(pidFile, 30) });
    const pgid = await waitFor('the holder to start', () => readPid(pidFile));
    client.transport.send = send;
    await expect('OVERLOADED', 'shell.exec', { command: 'true' });
    // A cancel the application sends itself (no AbortSignal): its call
    // answers CANCELLED as a result.
    await client.notification({ method: 'notifications/cancelled', params: { requestId: holderId, reason: 'test' } });
    const r = await holder;
    seen.CANCELLED = r.ok ? 'ok' : (r.code ?? `threw ${r.threw}`);
    if (r.code !== 'CANCELLED') problem(`CANCELLED: the cancelled call gave ${JSON.stringify(r)}`);
    await waitFor('the cancelled group to die', () => !groupAlive(pgid));
    report.errors = seen;
    await client.close();
  },

  // An AbortSignal sends notifications/cancelled: the command's process
  // group dies and the slot is released.
  async abort() {
    const { client } = await connect();
    const pidFile = join(scratch, 'abort.pid');
    const ac = new AbortController();
    const pending = call(client, 'shell.exec', { command: sleeper(pidFile, 31) }, { signal: ac.signal });
    const pgid = await waitFor('the command to start', () => readPid(pidFile));
    report.pgid = pgid;
    const t0 = performance.now();
    ac.abort('test');
    await waitFor('the process group to die', () => !groupAlive(pgid), 10000);
    report.cancelLatencyMs = +(performance.now() - t0).toFixed(2);
    const r = await pending;
    // The SDK rejects an aborted request at once; it never resolves.
    if (!r.threw) problem(`the aborted call settled as ${JSON.stringify(r)}`);
    const deadline = performance.now() + 20000;
    while ((await shellActive(client)) !== 0) {
      if (performance.now() > deadline) {
        problem('the shell slot was not released');
        break;
      }
    }
    await client.close();
  },

  // The same client object keeps working across a backend restart.
  async restart() {
    const { client } = await connect();
    report.sessionBefore = client.transport.sessionId ?? null;
    const before = await call(client, 'system.info', {});
    if (!before.ok) problem(`before the restart: ${JSON.stringify(before)}`);
    console.log(JSON.stringify({ event: 'restart-me' }));
    const lines = createInterface({ input: process.stdin });
    await new Promise((resolve) => lines.once('line', resolve));
    lines.close();
    for (const [name, args] of [['system.info', {}], ['shell.exec', { command: 'echo after' }]]) {
      const r = await call(client, name, args);
      if (!r.ok) problem(`after the restart, ${name}: ${JSON.stringify(r)}`);
    }
    // Cancellation still works under the session id of the old process.
    const pidFile = join(scratch, 'restart.pid');
    const ac = new AbortController();
    const pending = call(client, 'shell.exec', { command: sleeper(pidFile, 32) }, { signal: ac.signal });
    const pgid = await waitFor('the command to start', () => readPid(pidFile));
    ac.abort('test');
    await waitFor('the process group to die', () => !groupAlive(pgid), 10000);
    await pending;
    report.sessionAfter = client.transport.sessionId ?? null;
    await client.close();
  },

  // The bearer token travels in requestInit headers; without it, no way in.
  async token() {
    const { client } = await connect(process.env.MCP_TOKEN);
    const r = await call(client, 'system.info', {});
    if (!r.ok) problem(`with the token: ${JSON.stringify(r)}`);
    await client.close();
    try {
      await connect('wrong-token-0123456789');
      problem('connected with a wrong token');
    } catch (err) {
      report.wrongToken = `${err.name}: ${err.message}`.slice(0, 200);
    }
  },

  // A command longer than the SDK's default 60 s request timeout runs to
  // completion as a job: start, wait (each call well under the timeout)
  // until done, then every byte of its output and its exit code.
  async longjob() {
    const { client } = await connect();
    const secs = Number(process.env.JOB_SECONDS ?? 90);
    const t0 = performance.now();
    const started = await call(client, 'job.start', {
      command: `for i in $(seq 1 ${secs}); do echo line $i; sleep 1; done; exit 5`,
      idempotencyKey: 'ts-longjob', waitMs: 5000,
    });
    if (!started.ok) throw new Error(`job.start: ${JSON.stringify(started)}`);
    const id = started.result.job.id;
    let job = started.result.job;
    report.waits = 0;
    while (!job.done) {
      const w = await call(client, 'job.wait', { id, waitMs: 45000 });
      if (!w.ok) throw new Error(`job.wait: ${JSON.stringify(w)}`);
      job = w.result.job;
      report.waits++;
    }
    let text = '';
    let offset = 0;
    for (;;) {
      const o = await call(client, 'job.output', { id, stream: 'stdout', offset, maxBytes: 100 });
      if (!o.ok) throw new Error(`job.output: ${JSON.stringify(o)}`);
      if (o.result.encoding !== 'utf8') problem(`encoding ${o.result.encoding}`);
      text += o.result.data;
      offset = o.result.nextOffset;
      if (o.result.eof) break;
    }
    report.jobState = job.state;
    report.exitCode = job.exitCode;
    report.lines = text.trimEnd().split('\n').length;
    report.elapsedS = +((performance.now() - t0) / 1000).toFixed(1);
    const want = Array.from({ length: secs }, (_, i) => `line ${i + 1}`).join('\n') + '\n';
    if (text !== want) problem(`output ${JSON.stringify(text.slice(0, 200))}... is not the ${secs} lines`);
    if (job.state !== 'exited' || job.exitCode !== 5) problem(`job ended ${JSON.stringify(job)}`);
    await client.close();
  },

  // Many concurrent calls over the limits: every one settles as a result.
  async overload() {
    const { client } = await connect();
    const n = 24;
    const results = await Promise.all(Array.from({ length: n }, () => call(client, 'shell.exec', { command: 'sleep 1' })));
    const tally = {};
    for (const r of results) {
      const k = r.threw ? 'threw' : r.ok ? 'ok' : r.code;
      tally[k] = (tally[k] ?? 0) + 1;
      if (r.threw) problem(`a call threw: ${r.threw}`);
      else if (!r.ok && !(r.code === 'OVERLOADED' && r.retryable === true)) problem(`a call failed with ${JSON.stringify(r)}`);
    }
    report.tally = tally;
    if (!tally.ok || !tally.OVERLOADED) problem(`want both successes and OVERLOADED answers, got ${JSON.stringify(tally)}`);
    await client.close();
  },
};

try {
  if (!scenarios[scenario]) throw new Error(`unknown scenario ${scenario}`);
  await scenarios[scenario]();
} catch (err) {
  problem(`${err.name}: ${err.message}`);
}
report.problems = problems;
console.log(JSON.stringify(report));
process.exit(problems.length ? 1 : 0);
