// BullMQ's side of the peer benchmarks (loadtest/benchlib/peer_bullmq.py drives it).
//
//   node bench.js worker   --url URL --queue Q [--concurrency N]
//   node bench.js enqueue  --url URL --queue Q [--data-bytes B] < lines of [index, due ms]
//   node bench.js add-bulk --url URL --queue Q --jobs N [--per-call K] [--delay-ms D]
//                          [--data-bytes B] [--ids default|26]
//
// worker: BullMQ's own Worker class in this process, its defaults but `concurrency`, with a
// no-op handler that appends `<index> <due ms> <start ms>` to the file named by
// PEER_RECORD_FILE (one write on an O_APPEND descriptor per job, the format of
// benchlib/peer_tasks.py). The start is this machine's wall clock in ms, read first thing
// in the handler (performance.now() plus its offset to Date.now(), measured at start-up:
// the wall clock with sub-ms digits); the due time is the job's own (its timestamp +
// opts.delay). SIGTERM closes the worker and exits.
//
// enqueue: one awaited Queue.add per job, due at the given epoch ms (the job's timestamp is
// set to Date.now() at the call and its delay to due - timestamp, so BullMQ holds exactly
// that due time), with data {"i", "d", "p"} of --data-bytes (100) bytes of JSON; prints
// {"jobs", "seconds"} of the loop.
//
// add-bulk: Queue.addBulk of N jobs, K a call, each delayed D ms, with data
// {"p": "xxx..."} whose JSON is B bytes; ids BullMQ's own (a counter) or 26 random
// Crockford base32 characters (the length of a wheelq id). Prints {"jobs", "seconds",
// "jobs_per_s"} of the calls, the connection made and the scripts loaded beforehand.
//
// Only the JSON result goes to stdout; BullMQ's warnings go to stderr.
'use strict';

const crypto = require('node:crypto');
const fs = require('node:fs');
const { performance } = require('node:perf_hooks');
const { Queue, Worker } = require('bullmq');

function parseArgs(argv) {
  const [command, ...rest] = argv;
  const opts = {};
  for (let i = 0; i < rest.length; i += 2) {
    if (!rest[i].startsWith('--') || i + 1 >= rest.length) {
      throw new Error(`bad argument ${rest[i]}: expected --name value pairs`);
    }
    opts[rest[i].slice(2)] = rest[i + 1];
  }
  if (!opts.url || !opts.queue) throw new Error('--url and --queue are required');
  return { command, opts };
}

function connection(url) {
  const u = new URL(url);
  const options = {
    host: u.hostname,
    port: Number(u.port || 6379),
    db: Number(u.pathname.slice(1) || 0),
  };
  if (u.username) options.username = decodeURIComponent(u.username);
  if (u.password) options.password = decodeURIComponent(u.password);
  if (u.protocol === 'rediss:') options.tls = {};
  return options;
}

// The offset of the wall clock from performance.now(): Date.now() is whole ms, rounded
// down, so its largest difference from the performance.now() read just before it, over 20
// ms of samples (20 ticks: one is enough unless the process was preempted at every tick),
// is the offset to within microseconds.
function wallClockOffset() {
  let offset = -Infinity;
  const until = performance.now() + 20;
  for (let p = performance.now(); p < until; p = performance.now()) {
    offset = Math.max(offset, Date.now() - p);
  }
  return offset;
}

const OFFSET = wallClockOffset();

function nowMs() {
  return performance.now() + OFFSET;
}

function padding(dataBytes) {
  // JSON.stringify({p: s}) is 8 bytes plus s
  return 'x'.repeat(Math.max(0, dataBytes - 8));
}

const CROCKFORD = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';

function randomId() {
  const bytes = crypto.randomBytes(26);
  let id = '';
  for (const b of bytes) id += CROCKFORD[b & 31];
  return id;
}

async function runWorker(opts) {
  const fd = fs.openSync(process.env.PEER_RECORD_FILE, 'a', 0o644);
  const worker = new Worker(
    opts.queue,
    async (job) => {
      const start = nowMs();
      const due = Number(job.timestamp) + Number(job.opts.delay || 0);
      fs.writeSync(fd, `${job.data.i} ${due} ${start.toFixed(3)}\n`);
    },
    { connection: connection(opts.url), concurrency: Number(opts.concurrency || 1) },
  );
  worker.on('error', (err) => console.error(`bullmq worker error: ${err}`));
  let closing = false;
  const stop = async () => {
    if (closing) return;
    closing = true;
    await worker.close();
    fs.closeSync(fd);
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  await worker.waitUntilReady();
}

async function readStdin() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return Buffer.concat(chunks)
    .toString('utf8')
    .split('\n')
    .filter((line) => line.trim())
    .map((line) => JSON.parse(line));
}

async function runEnqueue(opts) {
  const items = await readStdin();
  const queue = new Queue(opts.queue, { connection: connection(opts.url) });
  await queue.waitUntilReady();
  const dataBytes = Number(opts['data-bytes'] || 100);
  const started = performance.now();
  for (const [index, dueMs] of items) {
    const timestamp = Date.now();
    const due = Math.round(dueMs);
    // {"i":…,"d":…,"p":"xx…"}: `dataBytes` of JSON in all
    const p = padding(dataBytes - `"i":${index},"d":${due},`.length);
    const delay = Math.max(0, due - timestamp);
    await queue.add('r', { i: index, d: due, p }, { timestamp, delay });
  }
  const seconds = (performance.now() - started) / 1000;
  await queue.close();
  return { jobs: items.length, seconds };
}

async function runAddBulk(opts) {
  const jobs = Number(opts.jobs);
  const perCall = Number(opts['per-call'] || 1000);
  const delay = Number(opts['delay-ms'] || 3_600_000);
  const ownIds = (opts.ids || 'default') === '26';
  const data = { p: padding(Number(opts['data-bytes'] || 100)) };
  const queue = new Queue(opts.queue, { connection: connection(opts.url) });
  await queue.waitUntilReady();
  // Each batch is built just before its call (millions of jobs do not fit Node's heap at
  // once); only the calls are timed.
  let spent = 0;
  for (let i = 0; i < jobs; i += perCall) {
    const batch = [];
    for (let j = i; j < Math.min(jobs, i + perCall); j++) {
      batch.push({ name: 'r', data, opts: ownIds ? { delay, jobId: randomId() } : { delay } });
    }
    const started = performance.now();
    await queue.addBulk(batch);
    spent += performance.now() - started;
  }
  const seconds = spent / 1000;
  await queue.close();
  return { jobs, seconds, jobs_per_s: Math.round(jobs / seconds) };
}

async function main() {
  const { command, opts } = parseArgs(process.argv.slice(2));
  if (command === 'worker') return runWorker(opts);
  const run = { enqueue: runEnqueue, 'add-bulk': runAddBulk }[command];
  if (!run) throw new Error(`unknown command ${command}: worker, enqueue or add-bulk`);
  process.stdout.write(`${JSON.stringify(await run(opts))}\n`);
  return undefined;
}

main().catch((err) => {
  console.error(err && err.stack ? err.stack : String(err));
  process.exit(1);
});
