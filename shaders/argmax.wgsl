// out[r] = index of the largest x[r, :] (lowest index on ties; NaN never wins).
// One workgroup per row: strided scan, then a tree reduction in workgroup memory.

struct Params {
    rows: u32,
    n: u32,
}

const WG: u32 = 256u;
const NONE: u32 = 0xffffffffu;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;          // [rows, n]
@group(0) @binding(2) var<storage, read_write> out: array<u32>;  // [rows]

var<workgroup> best_v: array<f32, WG>;
var<workgroup> best_i: array<u32, WG>;

fn better(v: f32, i: u32, bv: f32, bi: u32) -> bool {
    if i == NONE {
        return false;
    }
    return bi == NONE || v > bv || (v == bv && i < bi);
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let r = wid.x;
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
    if lid == 0u {
        out[r] = best_i[0];
    }
}
