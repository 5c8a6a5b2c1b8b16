// Copies the first N positions of one KV page into another page of the same layer, K and V alike:
// the copy-on-write of a partly shared page (WebGPU forbids a buffer-to-buffer copy within one
// buffer, so this is a kernel).
// Page layout (one layer): [pages, n_kv, PAGE, hd/2] u32 (two f16 per word).

struct Params {
    src: u32,   // source page
    dst: u32,   // destination page
    n: u32,     // positions to copy (≤ PAGE)
    n_kv: u32,  // KV heads
    page: u32,  // positions per page
    hw: u32,    // words per position and head (hd/2)
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> k_pages: array<u32>;    // [pages, n_kv, PAGE, hd/2]
@group(0) @binding(2) var<storage, read_write> v_pages: array<u32>;    // [pages, n_kv, PAGE, hd/2]

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let idx = gid.x;
    if idx >= p.n_kv * p.n * p.hw {
        return;
    }
    let w = idx % p.hw;
    let s = (idx / p.hw) % p.n;
    let h = idx / (p.hw * p.n);
    let off = (h * p.page + s) * p.hw + w;
    let page_words = p.n_kv * p.page * p.hw;
    k_pages[p.dst * page_words + off] = k_pages[p.src * page_words + off];
    v_pages[p.dst * page_words + off] = v_pages[p.src * page_words + off];
}
