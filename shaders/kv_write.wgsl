// Writes the K and V of T new tokens into their KV pages, as f16 pairs packed in u32.
// Token t goes to position pos[t]: page table[pos / PAGE], slot pos % PAGE.
// Page layout (one layer): [pages, n_kv, PAGE, hd/2] u32.

struct Params {
    t: u32,          // tokens
    n_kv: u32,       // KV heads
    hd: u32,         // head dim (even)
    page: u32,       // tokens per page
    row_stride: u32, // floats between token rows of src
    k_off: u32,      // float offset of K within a row
    v_off: u32,      // float offset of V within a row
    table_len: u32,  // entries in the page table
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src: array<vec2<f32>>;        // [T, row_stride/2]
@group(0) @binding(2) var<storage, read> pos: array<u32>;              // [T]
@group(0) @binding(3) var<storage, read> table: array<u32>;            // [table_len] page ids
@group(0) @binding(4) var<storage, read_write> k_pages: array<u32>;    // [pages, n_kv, PAGE, hd/2]
@group(0) @binding(5) var<storage, read_write> v_pages: array<u32>;    // [pages, n_kv, PAGE, hd/2]

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let idx = gid.x + gid.y * nw.x * 64u;
    let half_hd = p.hd / 2u;
    if idx >= p.t * p.n_kv * half_hd {
        return;
    }
    let i = idx % half_hd;
    let h = (idx / half_hd) % p.n_kv;
    let t = idx / (half_hd * p.n_kv);
    let position = pos[t];
    let page = table[min(position / p.page, p.table_len - 1u)];
    let dst = ((page * p.n_kv + h) * p.page + position % p.page) * half_hd + i;
    let row = t * p.row_stride + h * p.hd;
    k_pages[dst] = pack2x16float(src[(row + p.k_off) / 2u + i]);
    v_pages[dst] = pack2x16float(src[(row + p.v_off) / 2u + i]);
}
