#!/usr/bin/env node
// kvattn's CPU target against ONNX Runtime's CPU attention, same machine,
// same run, same shapes:
//
//   npm install --prefix bench/.ort onnxruntime-node   # once (see below)
//   node bench/compare_ort.mjs [--kvattn-bench build/bin/kvattn-bench]
//                              [--threads 1,0] [--repeats 5] [--quick]
//
// ONNX Runtime side: one com.microsoft GroupQueryAttention node (the op
// ONNX Runtime's own LLM exports use), f32, built here as an ONNX model
// without any Python dependency, run on the CPU execution provider with
// intra-op threads = 1 or all cores. Cached append is expressed the way
// that op expects it: the P cached keys as past_key/past_value
// [B, Hkv, P, D], the L new tokens as query/key/value [B, L, H * D], and
// seqlens_k = P + L - 1, so the mask is lower-right (row i sees keys up to
// P + i). Its time includes appending the new keys to the cache, which it
// does on every call.
//
// kvattn side: kvattn-bench --target=cpu with the same B, heads, P, L, D
// (the cache already holds the P + L keys; kvattn.append is a separate op).
//
// Each shape's line gives both median times (ms) and the ratio
// ort_ms / kvattn_ms: above 1 means kvattn is faster. Figures, not tests.
//
// onnxruntime-node's install script also downloads CUDA binaries from
// api.nuget.org; set ONNXRUNTIME_NODE_INSTALL_CUDA=skip when that host is
// unreachable (the CPU provider ships in the npm package itself).

import { createRequire } from "node:module";
import { execFileSync } from "node:child_process";
import { cpus } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const option = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : fallback;
};
const kvattnBench = option("--kvattn-bench", path.join(here, "..", "build", "bin", "kvattn-bench"));
const threadCounts = option("--threads", "1,0").split(",").map(Number);
const repeats = Number(option("--repeats", "5"));
const quick = args.includes("--quick");
// ONNX Runtime's serving layout: past_key/past_value are buffers with room
// for all P + L keys (P valid), the layout its GenAI runtime uses with
// past_present_share_buffer; otherwise the past holds exactly P keys.
const shareBuffer = !args.includes("--ort-exact-past");

function loadOrt() {
  const require = createRequire(import.meta.url);
  for (const where of [path.join(here, ".ort", "node_modules", "onnxruntime-node"), "onnxruntime-node"]) {
    try {
      return require(where);
    } catch {}
  }
  console.error("compare_ort: onnxruntime-node not found; install it with\n" +
                "  ONNXRUNTIME_NODE_INSTALL_CUDA=skip npm install --prefix bench/.ort onnxruntime-node");
  process.exit(2);
}
const ort = loadOrt();
ort.env.logLevel = "error";

// ---- a minimal protobuf writer for the ONNX model -------------------------

function varint(n) {
  const out = [];
  let v = BigInt(n);
  if (v < 0n) v += 1n << 64n;
  do {
    let byte = Number(v & 0x7fn);
    v >>= 7n;
    if (v) byte |= 0x80;
    out.push(byte);
  } while (v);
  return out;
}
const key = (field, wire) => varint((field << 3) | wire);
const bytes = (field, data) => [...key(field, 2), ...varint(data.length), ...data];
const str = (field, s) => bytes(field, [...Buffer.from(s, "utf8")]);
const int = (field, n) => [...key(field, 0), ...varint(n)];
const f32 = (field, x) => {
  const b = Buffer.alloc(4);
  b.writeFloatLE(x);
  return [...key(field, 5), ...b];
};

const FLOAT = 1, INT32 = 6;
/// dims: numbers, or strings for symbolic dimensions.
function valueInfo(name, elemType, dims) {
  const shape = dims.flatMap((d) => bytes(1, typeof d === "string" ? str(2, d) : int(1, d)));
  const tensorType = [...int(1, elemType), ...bytes(2, shape)];
  return [...str(1, name), ...bytes(2, bytes(1, tensorType))];
}
function attrInt(name, v) { return [...str(1, name), ...int(3, v), ...int(20, 2)]; }
function attrFloat(name, v) { return [...str(1, name), ...f32(2, v), ...int(20, 1)]; }

/// GroupQueryAttention over P cached keys and L new tokens.
function gqaModel(s) {
  const { b, hq, hkv, p, l, d } = s;
  const past = p > 0;
  const capacity = shareBuffer ? p + l : p;
  const inputs = [
    valueInfo("query", FLOAT, [b, l, hq * d]),
    valueInfo("key", FLOAT, [b, l, hkv * d]),
    valueInfo("value", FLOAT, [b, l, hkv * d]),
  ];
  if (past) {
    inputs.push(valueInfo("past_key", FLOAT, [b, hkv, capacity, d]));
    inputs.push(valueInfo("past_value", FLOAT, [b, hkv, capacity, d]));
  }
  inputs.push(valueInfo("seqlens_k", INT32, [b]));
  inputs.push(valueInfo("total_sequence_length", INT32, []));
  const node = [
    ...["query", "key", "value", past ? "past_key" : "", past ? "past_value" : "",
        "seqlens_k", "total_sequence_length"].flatMap((n) => str(1, n)),
    ...["output", "present_key", "present_value"].flatMap((n) => str(2, n)),
    ...str(3, "gqa"), ...str(4, "GroupQueryAttention"), ...str(7, "com.microsoft"),
    ...bytes(5, attrInt("num_heads", hq)), ...bytes(5, attrInt("kv_num_heads", hkv)),
    ...bytes(5, attrFloat("scale", 1 / Math.sqrt(d))),
  ];
  const outputs = [
    valueInfo("output", FLOAT, [b, l, hq * d]),
    // The op sizes the present cache from the past buffer or the total
    // length, whichever is larger: left symbolic.
    valueInfo("present_key", FLOAT, [b, hkv, "present_length", d]),
    valueInfo("present_value", FLOAT, [b, hkv, "present_length", d]),
  ];
  const graph = [
    ...bytes(1, node), ...str(2, "kvattn_compare"),
    ...inputs.flatMap((i) => bytes(11, i)), ...outputs.flatMap((o) => bytes(12, o)),
  ];
  const model = [
    ...int(1, 8), ...str(2, "kvattn/bench/compare_ort.mjs"),
    ...bytes(8, [...str(1, ""), ...int(2, 17)]),
    ...bytes(8, [...str(1, "com.microsoft"), ...int(2, 1)]),
    ...bytes(7, graph),
  ];
  return Uint8Array.from(model);
}

/// One Identity node on a scalar: the binding's cost of a call.
function identityModel() {
  const node = [...str(1, "x"), ...str(2, "y"), ...str(3, "id"), ...str(4, "Identity")];
  const graph = [...bytes(1, node), ...str(2, "overhead"),
                 ...bytes(11, valueInfo("x", FLOAT, [1])), ...bytes(12, valueInfo("y", FLOAT, [1]))];
  return Uint8Array.from([...int(1, 8), ...bytes(8, [...str(1, ""), ...int(2, 17)]), ...bytes(7, graph)]);
}

async function callOverheadMs() {
  const session = await ort.InferenceSession.create(identityModel(), { executionProviders: ["cpu"] });
  const feeds = { x: new ort.Tensor("float32", Float32Array.of(1), [1]) };
  const times = [];
  for (let r = 0; r < 50; ++r) {
    const start = process.hrtime.bigint();
    await session.run(feeds);
    times.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
  await session.release();
  times.sort((x, y) => x - y);
  return times[25];
}

function randomData(n, seed) {
  const a = new Float32Array(n);
  let x = BigInt(seed) * 0x9e3779b97f4a7c15n + 1n;
  const mask = (1n << 64n) - 1n;
  for (let i = 0; i < n; ++i) {
    x ^= (x << 13n) & mask; x ^= x >> 7n; x ^= (x << 17n) & mask;
    a[i] = Number(x >> 40n) / 16777216 - 0.5;
  }
  return a;
}

async function timeOrt(s, threads) {
  const session = await ort.InferenceSession.create(gqaModel(s), {
    executionProviders: ["cpu"],
    intraOpNumThreads: threads || cpus().length,
    interOpNumThreads: 1,
    graphOptimizationLevel: "all",
    // The op resizes present_key beyond the inferred shape on purpose.
    logSeverityLevel: 3,
  });
  const { b, hq, hkv, p, l, d } = s;
  const feeds = {
    query: new ort.Tensor("float32", randomData(b * l * hq * d, 1), [b, l, hq * d]),
    key: new ort.Tensor("float32", randomData(b * l * hkv * d, 2), [b, l, hkv * d]),
    value: new ort.Tensor("float32", randomData(b * l * hkv * d, 3), [b, l, hkv * d]),
    seqlens_k: new ort.Tensor("int32", Int32Array.from({ length: b }, () => p + l - 1), [b]),
    total_sequence_length: new ort.Tensor("int32", Int32Array.of(p + l), []),
  };
  if (p > 0) {
    const capacity = shareBuffer ? p + l : p;
    feeds.past_key = new ort.Tensor("float32", randomData(b * hkv * capacity * d, 4), [b, hkv, capacity, d]);
    feeds.past_value = new ort.Tensor("float32", randomData(b * hkv * capacity * d, 5), [b, hkv, capacity, d]);
  }
  await session.run(feeds); // warm-up
  const times = [];
  for (let r = 0; r < repeats; ++r) {
    const start = process.hrtime.bigint();
    await session.run(feeds);
    times.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
  await session.release();
  times.sort((x, y) => x - y);
  return times[Math.floor(times.length / 2)];
}

function timeKvattn(s, threads) {
  const out = execFileSync(kvattnBench, [
    "--target=cpu", `--num-threads=${threads}`, `--repeats=${repeats}`,
    `--batch=${s.b}`, `--heads=${s.hq}/${s.hkv}`, `--prefixes=${s.p}`,
    `--lengths=${s.l}`, `--head-dims=${s.d}`,
  ], { encoding: "utf8" });
  // The shape line: name B Hq/Hkv P L D compile_ms run_ms GFLOP/s %peak.
  const line = out.split("\n").find((x) => /^(decode|append|prefill)\s/.test(x));
  const fields = line.trim().split(/\s+/);
  return { ms: Number(fields[7]), gflops: Number(fields[8]), peak: Number(fields[9]) };
}

const shapes = quick
  ? [{ b: 1, hq: 8, hkv: 2, p: 512, l: 1, d: 64 }, { b: 1, hq: 8, hkv: 2, p: 0, l: 128, d: 64 }]
  : [
      { b: 1, hq: 8, hkv: 2, p: 4096, l: 1, d: 64 },
      { b: 1, hq: 8, hkv: 2, p: 1024, l: 64, d: 64 },
      { b: 1, hq: 8, hkv: 2, p: 0, l: 1024, d: 64 },
      { b: 1, hq: 8, hkv: 2, p: 4096, l: 1, d: 128 },
      { b: 1, hq: 8, hkv: 2, p: 1024, l: 64, d: 128 },
      { b: 1, hq: 8, hkv: 2, p: 0, l: 1024, d: 128 },
      { b: 8, hq: 32, hkv: 8, p: 4096, l: 1, d: 128 },
      { b: 1, hq: 32, hkv: 8, p: 1024, l: 64, d: 128 },
    ];

console.log(`compare_ort: onnxruntime-node ${ort.env.versions?.common ?? "?"} (CPU EP, GroupQueryAttention), ` +
            `kvattn-bench ${kvattnBench}; f32, median of ${repeats}; ${cpus().length} cores`);
console.log(`onnxruntime-node's own cost of one run() call (an Identity model): ` +
            `${(await callOverheadMs()).toFixed(3)} ms, included in ort_ms`);
console.log("threads shape    B Hq/Hkv     P     L    D    ort_ms  kvattn_ms  ort/kvattn  kvattn_%peak");
const ratios = new Map();
for (const threads of threadCounts) {
  for (const s of shapes) {
    const name = s.l <= 8 ? "decode" : s.p ? "append" : "prefill";
    const ortMs = await timeOrt(s, threads);
    const kv = timeKvattn(s, threads);
    const ratio = ortMs / kv.ms;
    if (!ratios.has(threads)) ratios.set(threads, []);
    ratios.get(threads).push(ratio);
    const t = threads || cpus().length;
    console.log(
      `${String(t).padStart(7)} ${name.padEnd(8)} ${String(s.b).padStart(1)} ${`${s.hq}/${s.hkv}`.padStart(6)} ` +
      `${String(s.p).padStart(5)} ${String(s.l).padStart(5)} ${String(s.d).padStart(4)} ` +
      `${ortMs.toFixed(3).padStart(9)} ${kv.ms.toFixed(3).padStart(10)} ${ratio.toFixed(2).padStart(11)} ` +
      `${kv.peak.toFixed(1).padStart(13)}`);
  }
}
for (const [threads, rs] of ratios) {
  const geo = Math.exp(rs.reduce((a, r) => a + Math.log(r), 0) / rs.length);
  console.log(`threads=${threads || cpus().length}: geometric mean ort/kvattn = ${geo.toFixed(2)}, ` +
              `min = ${Math.min(...rs).toFixed(2)}`);
}
