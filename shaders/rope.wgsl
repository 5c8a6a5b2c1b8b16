// Rotary position embedding, adjacent-pair ("normal" GGUF llama) form, in place:
//   (x[2i], x[2i+1]) ← (x[2i]·c − x[2i+1]·s, x[2i]·s + x[2i+1]·c),  (c, s) = table[pos, i]
// applied to the first `heads` heads of each token row (a row may hold more, e.g. Q | K | V).
// The (cos, sin) table is computed once on the CPU in f64 (exact for any position).

struct Params {
    t: u32,          // tokens
    heads: u32,      // heads to rotate, from the start of each row
    row_stride: u32, // floats between consecutive token rows
    hd: u32,         // head dim (even)
    max_pos: u32,    // rows of the table
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> x: array<vec2<f32>>;  // [T, row_stride/2]
@group(0) @binding(2) var<storage, read> pos: array<u32>;            // [T]
@group(0) @binding(3) var<storage, read> table: array<vec2<f32>>;    // [max_pos, hd/2] (cos, sin)

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let idx = gid.x + gid.y * nw.x * 64u;
    let half_hd = p.hd / 2u;
    if idx >= p.t * p.heads * half_hd {
        return;
    }
    let i = idx % half_hd;
    let h = (idx / half_hd) % p.heads;
    let t = idx / (half_hd * p.heads);
    let cs = table[min(pos[t], p.max_pos - 1u) * half_hd + i];
    let j = (t * p.row_stride + h * p.hd) / 2u + i;
    let v = x[j];
    x[j] = vec2<f32>(v.x * cs.x - v.y * cs.y, v.x * cs.y + v.y * cs.x);
}
