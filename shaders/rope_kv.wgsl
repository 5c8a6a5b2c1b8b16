// RoPE on the Q and K heads of T new tokens' Q|K|V rows and their K and V into the KV pages:
// rope.wgsl then kv_write.wgsl in one dispatch (prefill), with the same expressions, so the pages
// and Q get the same bits. Q is rotated in place; K is rotated on its way into the pages (the rows
// keep it unrotated: attention reads K from the pages); V is written as it is.
// Pages: [pages, n_kv, PAGE, hd/2] u32 (f16 pairs); token t at position pos[t], page
// table[pos / PAGE], slot pos % PAGE.

struct Params {
    t: u32,          // tokens
    n_head: u32,     // Q heads (first in each row), then n_kv K heads, then n_kv V heads
    n_kv: u32,       // KV heads
    hd: u32,         // head dim (even)
    page: u32,       // positions a page
    row_stride: u32, // floats between token rows
    table_len: u32,  // entries in the page table
    max_pos: u32,    // rows of the RoPE table
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> qkv: array<vec2<f32>>;  // [T, row_stride/2]
@group(0) @binding(2) var<storage, read> pos: array<u32>;              // [T]
@group(0) @binding(3) var<storage, read> table: array<u32>;            // [table_len] page ids
@group(0) @binding(4) var<storage, read> rope: array<vec2<f32>>;       // [max_pos, hd/2] (cos, sin)
@group(0) @binding(5) var<storage, read_write> k_pages: array<u32>;
@group(0) @binding(6) var<storage, read_write> v_pages: array<u32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let idx = gid.x + gid.y * nw.x * 64u;
    let half_hd = p.hd / 2u;
    let heads = p.n_head + p.n_kv;
    if idx >= p.t * heads * half_hd {
        return;
    }
    let i = idx % half_hd;
    let h = (idx / half_hd) % heads;
    let t = idx / (half_hd * heads);
    let position = pos[t];
    let cs = rope[min(position, p.max_pos - 1u) * half_hd + i];
    let j = (t * p.row_stride + h * p.hd) / 2u + i;
    let v = qkv[j];
    let r = vec2<f32>(v.x * cs.x - v.y * cs.y, v.x * cs.y + v.y * cs.x);
    if h < p.n_head {
        qkv[j] = r;
        return;
    }
    let page = table[min(position / p.page, p.table_len - 1u)];
    let dst = ((page * p.n_kv + h - p.n_head) * p.page + position % p.page) * half_hd + i;
    k_pages[dst] = pack2x16float(r);
    v_pages[dst] = pack2x16float(qkv[j + p.n_kv * half_hd]);
}
