// out[r] = index of the largest x[r, :] (lowest index on ties; NaN never wins).
// One workgroup per row: strided scan, then a tree reduction in workgroup memory.
// `feed` (greedy decoding ahead of the CPU): one row; its id goes to out[slot] and to tokens[0],
// where the next step's embedding reads it, and the position advances, so the next step can
// run without the CPU seeing this one.

struct Params {
    rows: u32,
    n: u32,
    slot: u32, // feed: where in `out` the id goes
}

const WG: u32 = 256u;
const NONE: u32 = 0xffffffffu;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;          // [rows, n]
@group(0) @binding(2) var<storage, read_write> out: array<u32>;  // [rows] ([slots] for feed)
@group(0) @binding(3) var<storage, read_write> tokens: array<u32>; // feed: [1] the next step's token
@group(0) @binding(4) var<storage, read_write> pos: array<u32>;    // feed: [1] the next step's position

var<workgroup> best_v: array<f32, WG>;
var<workgroup> best_i: array<u32, WG>;

fn better(v: f32, i: u32, bv: f32, bi: u32) -> bool {
    if i == NONE {
        return false;
    }
    return bi == NONE || v > bv || (v == bv && i < bi);
}

// The argmax of row r (valid in every lane).
fn row_argmax(r: u32, lid: u32) -> u32 {
    var bv = 0.0;
    var bi = NONE;
    for (var i = lid; i < p.n; i += WG) {
        let v = x[r * p.n + i];
        if v == v && (bi == NONE || v > bv) {
            bv = v;
            bi = i;
        }
    }
    best_v[lid] = bv;
    best_i[lid] = bi;
    for (var s = WG / 2u; s > 0u; s /= 2u) {
        workgroupBarrier();
        if lid < s && better(best_v[lid + s], best_i[lid + s], best_v[lid], best_i[lid]) {
            best_v[lid] = best_v[lid + s];
            best_i[lid] = best_i[lid + s];
        }
    }
    workgroupBarrier();
    return best_i[0];
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let best = row_argmax(wid.x, lid);
    if lid == 0u {
        out[wid.x] = best;
    }
}

@compute @workgroup_size(WG)
fn feed(@builtin(local_invocation_index) lid: u32) {
    let best = row_argmax(0u, lid);
    if lid == 0u {
        out[p.slot] = best;
        tokens[0] = best;
        pos[0] += 1u;
    }
}
