// What a temperature sampler needs from one row of logits, so that it need not read all of them:
// the K largest (every logit whose order key is at least the K-th largest key, ties included, up
// to `cap` of them), the row's largest logit m, S = Σ exp((x - m) / T) over the row, and the
// logits of the repetition-penalty window. NaN is never a candidate and is left out of S.
//
// One workgroup of 256 lanes. The K-th largest key is found by a radix select: four passes, one
// per byte of the key, each building a 256-bin histogram (workgroup atomics) of the keys that
// share the bytes chosen so far, from which lane 0 picks the bin holding the K-th largest.
//
// out layout (u32 words; its one owner on the Rust side is ops::TopkLayout in src/ops/topk.rs):
//   [0] how many logits have a key >= the threshold (may exceed cap: the caller then reads all)
//   [1] the threshold key (the K-th largest key; 1 when the row has fewer than K non-NaN logits)
//   [2] m as f32 bits     [3] S as f32 bits
//   [4 .. 4 + 2 cap)      (id, logit bits) of the first min(count, cap) candidates, unordered
//   [4 + 2 cap ..)        the logit bits of window[i] for i < window length

struct Params {
    n: u32,       // logits in the row
    k: u32,       // how many of the largest are wanted
    cap: u32,     // candidate slots in out
    inv_t: f32,   // 1 / temperature
    window: u32,  // penalty-window ids in `win`
}

const WG: u32 = 256u;
const HEADER: u32 = 4u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> win: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<u32>;

var<workgroup> hist: array<atomic<u32>, 256>;
var<workgroup> max_key: atomic<u32>;
var<workgroup> count: atomic<u32>;
var<workgroup> sums: array<f32, WG>;
var<workgroup> chosen: u32;     // the byte picked by this pass
var<workgroup> remaining: u32;  // how many of the largest are still to be found below the prefix
var<workgroup> take_all: u32;   // 1 when the row has fewer than k non-NaN logits

// Unsigned keys ordered as the floats are (-0 just below +0); 0 for NaN, which is never counted.
// NaN is found from the bits: lavapipe folds `v != v` to false.
fn key(v: f32) -> u32 {
    let b = bitcast<u32>(v);
    if (b & 0x7fffffffu) > 0x7f800000u {
        return 0u;
    }
    if (b & 0x80000000u) != 0u {
        return ~b;
    }
    return b | 0x80000000u;
}

fn unkey(k: u32) -> f32 {
    if (k & 0x80000000u) != 0u {
        return bitcast<f32>(k & 0x7fffffffu);
    }
    return bitcast<f32>(~k);
}

@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_index) lid: u32) {
    if lid == 0u {
        atomicStore(&max_key, 0u);
        atomicStore(&count, 0u);
        remaining = p.k;
        take_all = 0u;
    }
    workgroupBarrier();

    // The row's largest key.
    var local_max = 0u;
    for (var i = lid; i < p.n; i += WG) {
        local_max = max(local_max, key(x[i]));
    }
    atomicMax(&max_key, local_max);
    workgroupBarrier();
    let mk = atomicLoad(&max_key);
    let m = unkey(mk);

    // S, relative to m (0 when m is not finite: the caller reads all logits then).
    var s = 0.0;
    if mk != 0u && abs(m) <= 3.4e38 {
        for (var i = lid; i < p.n; i += WG) {
            let v = x[i];
            if key(v) != 0u {
                s += exp((v - m) * p.inv_t);
            }
        }
    }
    sums[lid] = s;
    for (var w = WG / 2u; w > 0u; w /= 2u) {
        workgroupBarrier();
        if lid < w {
            sums[lid] += sums[lid + w];
        }
    }

    // Radix select of the k-th largest key, one byte a pass from the top.
    var prefix = 0u;
    var mask = 0u;
    for (var round = 0u; round < 4u; round++) {
        let shift = 24u - 8u * round;
        atomicStore(&hist[lid], 0u);
        workgroupBarrier();
        for (var i = lid; i < p.n; i += WG) {
            let kk = key(x[i]);
            if kk != 0u && (kk & mask) == prefix {
                atomicAdd(&hist[(kk >> shift) & 255u], 1u);
            }
        }
        workgroupBarrier();
        if lid == 0u {
            var r = remaining;
            var b = 256u;
            var pick = 0u;
            var found = false;
            loop {
                if b == 0u {
                    break;
                }
                b -= 1u;
                let c = atomicLoad(&hist[b]);
                if c >= r {
                    pick = b;
                    found = true;
                    break;
                }
                r -= c;
            }
            if !found {
                // Only possible in the first pass: fewer than k non-NaN logits. Take them all.
                take_all = 1u;
                r = 1u;
            }
            chosen = pick;
            remaining = r;
        }
        let digit = workgroupUniformLoad(&chosen);
        prefix |= digit << shift;
        mask |= 255u << shift;
    }
    var threshold = max(prefix, 1u);
    if workgroupUniformLoad(&take_all) == 1u {
        threshold = 1u;
    }

    // Every logit with a key at or above the threshold, up to cap.
    for (var i = lid; i < p.n; i += WG) {
        let v = x[i];
        if key(v) >= threshold {
            let slot = atomicAdd(&count, 1u);
            if slot < p.cap {
                out[HEADER + 2u * slot] = i;
                out[HEADER + 2u * slot + 1u] = bitcast<u32>(v);
            }
        }
    }
    for (var i = lid; i < p.window; i += WG) {
        let id = win[i];
        var v = bitcast<u32>(0.0);
        if id < p.n {
            v = bitcast<u32>(x[id]);
        }
        out[HEADER + 2u * p.cap + i] = v;
    }
    workgroupBarrier();
    if lid == 0u {
        out[0] = atomicLoad(&count);
        out[1] = threshold;
        out[2] = bitcast<u32>(m);
        out[3] = bitcast<u32>(sums[0]);
    }
}
