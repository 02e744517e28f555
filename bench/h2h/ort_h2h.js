// ONNX Runtime's side of the head-to-head harness (bench/h2h/run.sh): ResNet-18 inference on the
// model torch_h2h.py exported, through onnxruntime-node's CPU execution provider.
//
//   node bench/h2h/ort_h2h.js --dir DIR [--group infer|compile] [--quick] [--threads 2]
//
// DIR holds resnet18.onnx and inputs.safetensors (x64, and PyTorch's logits64 for the correctness
// check). Prints one JSON object on stdout in kiln_h2h's format (results resnet18_infer_b1,
// resnet18_infer_b64; info logits_max_rel_err); progress goes to stderr. Timing is the algorithm
// of h2h_common.h; each call is one awaited session.run, as a Node service would make it.
// --group compile: session creation time, then first call and latency at batch 1, 8, 32, 64, 128
// (results resnet18_latency_bN).
'use strict';
const fs = require('fs');
const path = require('path');
const ort = require('onnxruntime-node');

function parseArgs(argv) {
  const a = {dir: '', quick: false, threads: 2, group: 'infer'};
  for (let i = 0; i < argv.length; ++i) {
    if (argv[i] === '--dir') a.dir = argv[++i];
    else if (argv[i] === '--group') a.group = argv[++i];
    else if (argv[i] === '--quick') a.quick = true;
    else if (argv[i] === '--threads') a.threads = parseInt(argv[++i], 10);
    else throw new Error(`unknown argument '${argv[i]}'`);
  }
  if (!a.dir) throw new Error('--dir is required');
  if (a.group !== 'infer' && a.group !== 'compile') throw new Error(`unknown group '${a.group}'`);
  return a;
}

// Float32 tensors of a safetensors file: {name: {shape, data: Float32Array}}.
function loadSafetensors(file) {
  const buf = fs.readFileSync(file);
  const n = Number(buf.readBigUInt64LE(0));
  const header = JSON.parse(buf.subarray(8, 8 + n).toString('utf8'));
  const out = {};
  for (const [name, info] of Object.entries(header)) {
    if (name === '__metadata__' || info.dtype !== 'F32') continue;
    const [b, e] = info.data_offsets;
    const bytes = buf.subarray(8 + n + b, 8 + n + e);
    // Copy into an aligned buffer: Float32Array needs a 4-byte-aligned offset.
    const data = new Float32Array(bytes.length / 4);
    Buffer.from(data.buffer).set(bytes);
    out[name] = {shape: info.shape, data};
  }
  return out;
}

function loadavg() {
  return fs.readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
}

function log(msg) {
  process.stderr.write(`ort_h2h: ${msg}\n`);
}

const now = () => Number(process.hrtime.bigint()) / 1e9;

async function runFor(fn, iters) {
  const start = now();
  for (let i = 0; i < iters; ++i) await fn();
  return now() - start;
}

function median(v) {
  const s = [...v].sort((x, y) => x - y);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : 0.5 * (s[m - 1] + s[m]);
}

async function timeWorkload(fn, warmup, reps, minTime = 0) {
  let last = 0;
  for (let i = 0; i < warmup; ++i) last = await runFor(fn, 1);
  let inner = 1;
  if (minTime > 0 && last < minTime) {
    for (;;) {
      const elapsed = await runFor(fn, inner);
      if (elapsed >= minTime) break;
      const grow = Math.min(10, (1.4 * minTime) / Math.max(elapsed, 1e-9));
      inner = Math.max(inner + 1, Math.floor(inner * grow));
    }
  }
  const perCall = [];
  const cpu = [];
  for (let r = 0; r < reps; ++r) {
    const cpu0 = process.cpuUsage();
    perCall.push((await runFor(fn, inner)) / inner);
    const d = process.cpuUsage(cpu0);
    cpu.push((d.user + d.system) / 1e6 / inner);
  }
  return {median_s: median(perCall), min_s: Math.min(...perCall), reps, inner,
          samples_s: perCall, cpu_median_s: median(cpu)};
}

function createSession(a) {
  return ort.InferenceSession.create(path.join(a.dir, 'resnet18.onnx'), {
    executionProviders: ['cpu'],
    intraOpNumThreads: a.threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
  });
}

// Session creation (load, graph optimization, kernel setup: ONNX Runtime's compile step, done once
// for the model's dynamic batch), then the first call and the latency at each batch size.
async function compileGroup(a) {
  const t0 = now();
  const session = await createSession(a);
  const info = {session_create_s: now() - t0};
  const inName = session.inputNames[0];
  const results = {};
  for (const b of [1, 8, 32, 64, 128]) {
    const data = new Float32Array(b * 3 * 32 * 32);
    for (let i = 0; i < data.length; ++i) data[i] = Math.sin(i);
    const x = new ort.Tensor('float32', data, [b, 3, 32, 32]);
    const f0 = now();
    await session.run({[inName]: x});
    info[`first_call_s_b${b}`] = now() - f0;
    results[`resnet18_latency_b${b}`] = await timeWorkload(() => session.run({[inName]: x}), 1,
                                                           a.quick ? 3 : 5, a.quick ? 0.05 : 0.2);
    log(`batch ${b} done`);
  }
  return {results, info};
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const before = loadavg();
  if (a.group === 'compile') {
    const {results, info} = await compileGroup(a);
    process.stdout.write(JSON.stringify({
      side: 'ort', group: 'compile', quick: a.quick, threads: a.threads,
      version: ort.env.versions ? ort.env.versions.node : 'unknown',
      loadavg_before: before, loadavg_after: loadavg(), results, info,
    }, null, 1) + '\n');
    return;
  }
  const session = await createSession(a);
  const inputs = loadSafetensors(path.join(a.dir, 'inputs.safetensors'));
  const x = inputs.x64;
  const want = inputs.logits64.data;
  const perImage = x.data.length / x.shape[0];
  const x64 = new ort.Tensor('float32', x.data, x.shape);
  const x1 = new ort.Tensor('float32', x.data.slice(0, perImage), [1, ...x.shape.slice(1)]);
  const inName = session.inputNames[0];
  const outName = session.outputNames[0];

  // Correctness guard: ORT's logits against PyTorch's on the same 64 images.
  const got = (await session.run({[inName]: x64}))[outName].data;
  let maxDiff = 0;
  let maxRef = 0;
  for (let i = 0; i < want.length; ++i) {
    maxDiff = Math.max(maxDiff, Math.abs(got[i] - want[i]));
    maxRef = Math.max(maxRef, Math.abs(want[i]));
  }
  const rel = got.length === want.length ? maxDiff / Math.max(maxRef, 1e-30) : Infinity;
  log(`resnet18 logits vs PyTorch: max |diff| / max |ref| = ${rel.toExponential(3)}`);

  const results = {};
  results.resnet18_infer_b1 = await timeWorkload(() => session.run({[inName]: x1}), 3,
                                                 a.quick ? 5 : 9, a.quick ? 0.05 : 0.2);
  log('resnet18_infer_b1 done');
  results.resnet18_infer_b64 = await timeWorkload(() => session.run({[inName]: x64}), 1,
                                                  a.quick ? 3 : 7);
  log('resnet18_infer_b64 done');
  const out = {
    side: 'ort', group: 'infer', quick: a.quick, threads: a.threads,
    version: ort.env.versions ? ort.env.versions.node : 'unknown',
    loadavg_before: before, loadavg_after: loadavg(), results,
    info: {logits_max_rel_err: rel, logits_max_abs_err: maxDiff},
  };
  process.stdout.write(JSON.stringify(out, null, 1) + '\n');
}

main().catch((e) => {
  process.stderr.write(`ort_h2h: ${e.stack || e}\n`);
  process.exit(1);
});
