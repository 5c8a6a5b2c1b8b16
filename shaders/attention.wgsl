// Causal grouped-query attention over paged KV:
//   out[t, h] = Σ_j softmax_j(q[t, h] · k[j, g] / √hd) · v[j, g],  j = lo ..= pos[t],  g = h / (H / H_kv)
// with lo = 0, or with a sliding window of W positions (Gemma-3's local layers) lo = pos[t] + 1 − W.
// K/V come from the pages (f16 pairs in u32) through the page table, so the new tokens' own K/V
// must be written first (kv_write). Online softmax in f32: no [T, ctx] score buffer.
//
// `main` runs one (token, GROUP query heads, split) per invocation. With splits = 1 it writes `out` directly.
// With splits > 1 (decode: few tokens × heads, long context) each invocation covers one slice of
// the positions and writes its unnormalised partial (acc, max, sum) to `part`; `combine` then
// merges the slices of each (token, head) — flash-decoding, so a single query still spreads over
// many invocations. With `span` > 0 the slices are fixed runs of `span` positions (slice s covers
// positions s·span ..), so a query's result depends only on its own position, never on which other
// queries share the pass (prefill needs that: see ops::Split).
//
// FUSED = 1 (decode, one token) folds RoPE and kv_write in: q and the token's own K are rotated
// here with the (cos, sin) table, the own position's K/V come from the q|k|v row itself (rounded to
// f16 as the pages would hold them), and one invocation per KV head writes them to the pages for
// later tokens. Bit for bit what rope → kv_write → attention compute.


struct Params {
    t: u32,          // query tokens
    n_head: u32,     // query heads
    n_kv: u32,       // KV heads (divides n_head)
    hd: u32,         // head dim (multiple of 4, ≤ 256)
    page: u32,       // tokens per page
    q_stride: u32,   // floats between token rows of q
    scale: f32,      // usually 1/√hd
    table_len: u32,  // entries in the page table
    splits: u32,     // position slices per (token, head)
    span: u32,       // positions per slice (0: the positions split evenly into `splits`)
    window: u32,     // a query at position pos sees the last `window` positions (0: all)
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<vec4<f32>>;        // [T, q_stride/4]; head h at h·hd
@group(0) @binding(2) var<storage, read> pos: array<u32>;            // [T]
@group(0) @binding(3) var<storage, read> table: array<u32>;          // [table_len] page ids
@group(0) @binding(4) var<storage, read_write> k_pages: array<u32>;  // [pages, n_kv, PAGE, hd/2]
@group(0) @binding(5) var<storage, read_write> v_pages: array<u32>;  // [pages, n_kv, PAGE, hd/2]
@group(0) @binding(6) var<storage, read_write> out: array<vec4<f32>>; // [T, n_head·hd/4]
@group(0) @binding(7) var<storage, read_write> part: array<vec4<f32>>; // [T, n_head, splits, hd/4 + 1]: acc…, (max, sum, 0, 0)
@group(0) @binding(8) var<storage, read> rope: array<vec4<f32>>;     // [max_pos, hd/4]: (cos, sin) of two pairs (FUSED)

override FUSED: u32 = 0u;

// Values 4i .. 4i+3 of a head rotated for `position` (the rope kernel's arithmetic).
fn rotate(v: vec4<f32>, position: u32, i: u32) -> vec4<f32> {
    let hd4 = p.hd / 4u;
    let cs = rope[min(position, max(arrayLength(&rope) / hd4, 1u) - 1u) * hd4 + i];
    return vec4<f32>(v.x * cs.x - v.y * cs.y, v.x * cs.y + v.y * cs.x, v.z * cs.z - v.w * cs.w, v.z * cs.w + v.w * cs.z);
}

// v rounded to the nearest f16 (ties to even), as pack2x16float stores it in the pages. Written out
// because a compiler may fold unpack2x16float(pack2x16float(v)) into v (lavapipe does).
fn f16_round(v: vec4<f32>) -> vec4<f32> {
    let a = abs(v);
    // Normal f16 range: keep 10 mantissa bits of 23.
    let b = bitcast<vec4<u32>>(a);
    let normal = bitcast<vec4<f32>>((b + vec4<u32>(0xfffu) + ((b >> vec4<u32>(13u)) & vec4<u32>(1u))) & vec4<u32>(0xffffe000u));
    // Below 2^-14 (f16 subnormals): multiples of 2^-24; past 65519.99: infinity.
    let sub = round(a * 16777216.0) / 16777216.0;
    var r = select(normal, sub, a < vec4<f32>(6.103515625e-5));
    // Infinity built from a run-time value: WGSL rejects an infinite constant expression.
    let inf = bitcast<vec4<f32>>(vec4<u32>(0x7f800000u) | (b & vec4<u32>(0u)));
    r = select(r, inf, a >= vec4<f32>(65520.0));
    return sign(v) * r;
}

// The first position a query sees when it is at position n − 1 (its window's start).
fn first_pos(n: u32) -> u32 {
    return select(0u, n - p.window, p.window > 0u && n > p.window);
}

// Word 0 of position j's row for KV head g in the pages (through the page table).
fn kv_base(j: u32, g: u32) -> u32 {
    let page = table[min(j / p.page, p.table_len - 1u)];
    return ((page * p.n_kv + g) * p.page + j % p.page) * (p.hd / 2u);
}

// FUSED: writes values 4i .. 4i+3 of the token's own K (rotated) and V, from its q|k|v row at
// vec4 index `row`, into the pages at `base` — what rope → kv_write store there.
fn write_own(base: u32, row: u32, own: u32, i: u32) {
    let k = rotate(q[row + i], own, i);
    let v = q[row + p.n_kv * p.hd / 4u + i];
    k_pages[base + 2u * i] = pack2x16float(k.xy);
    k_pages[base + 2u * i + 1u] = pack2x16float(k.zw);
    v_pages[base + 2u * i] = pack2x16float(v.xy);
    v_pages[base + 2u * i + 1u] = pack2x16float(v.zw);
}

// K (or V) values 4i .. 4i+3 of position j: from the pages, or (FUSED) for the token's own
// position `own`, from its q|k|v row at vec4 index `row`.
fn kv_at(is_k: bool, base: u32, i: u32, j: u32, own: u32, row: u32) -> vec4<f32> {
    if FUSED == 1u && j == own {
        if is_k {
            return f16_round(rotate(q[row + i], own, i));
        }
        return f16_round(q[row + p.n_kv * p.hd / 4u + i]);
    }
    return kv4(is_k, base, i);
}

fn kv4(buf_is_k: bool, base: u32, i: u32) -> vec4<f32> {
    if buf_is_k {
        return vec4<f32>(unpack2x16float(k_pages[base + 2u * i]), unpack2x16float(k_pages[base + 2u * i + 1u]));
    }
    return vec4<f32>(unpack2x16float(v_pages[base + 2u * i]), unpack2x16float(v_pages[base + 2u * i + 1u]));
}

// Quad i of query row th's result over slice `split`: the normalised output (one slice) or the
// unnormalised partial, with the slice's (max, sum) written once (`header`) for `combine`.
fn put_result(th: u32, split: u32, i: u32, a: vec4<f32>, m: f32, l: f32, header: bool) {
    let hd4 = p.hd / 4u;
    if p.splits == 1u {
        out[th * hd4 + i] = a / l;
    } else {
        let pb = (th * p.splits + split) * (hd4 + 1u);
        part[pb + i] = a;
        if header {
            part[pb + hd4] = vec4<f32>(m, l, 0.0, 0.0);
        }
    }
}

// Query heads per invocation: 1, or several heads sharing one KV head (GROUP divides
// n_head / n_kv, GROUP·hd/4 ≤ 128), so each K/V row is read once for all of them.
override GROUP: u32 = 1u;
// Invocations per workgroup of `main`: small on CPU adapters (one SIMD width), so that the few
// invocations of a decode step still spread over every CPU thread.
override WG: u32 = 64u;
const MAX_Q4: u32 = 128u;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let idx = gid.x + gid.y * nw.x * WG;
    let groups = p.n_head / GROUP;
    if idx >= p.t * groups * p.splits {
        return;
    }
    let split = idx % p.splits;
    let tg = idx / p.splits;
    let t = tg / groups;
    let h0 = (tg % groups) * GROUP;
    let g = h0 / (p.n_head / p.n_kv);
    let hd4 = p.hd / 4u;
    var qv: array<vec4<f32>, MAX_Q4>;  // [GROUP, hd/4]
    var acc: array<vec4<f32>, MAX_Q4>; // [GROUP, hd/4]
    var m: array<f32, 8>;
    var l: array<f32, 8>;
    let own = pos[t];
    for (var r = 0u; r < GROUP; r++) {
        let qb = (t * p.q_stride + (h0 + r) * p.hd) / 4u;
        for (var i = 0u; i < hd4; i++) {
            var qq = q[qb + i];
            if FUSED == 1u {
                qq = rotate(qq, own, i);
            }
            qv[r * hd4 + i] = qq * p.scale;
            acc[r * hd4 + i] = vec4<f32>(0.0);
        }
        m[r] = -3.0e38;
        l[r] = 0.0;
    }
    let n = own + 1u;
    let per = select((n + p.splits - 1u) / p.splits, p.span, p.span > 0u);
    let end = min(n, (split + 1u) * per);
    // The token's own K row in q (its V row follows the n_kv K heads).
    let krow = (t * p.q_stride + (p.n_head + g) * p.hd) / 4u;
    if FUSED == 1u && h0 % (p.n_head / p.n_kv) == 0u && split * per <= own && own < end {
        let base = kv_base(own, g);
        for (var i = 0u; i < hd4; i++) {
            write_own(base, krow, own, i);
        }
    }
    // The page table is read once a page: positions of a page are consecutive rows.
    let start = max(split * per, first_pos(n));
    var base = kv_base(start, g);
    for (var j = start; j < end; j++) {
        if j % p.page == 0u {
            base = kv_base(j, g);
        }
        // Zeroed explicitly: Chromium's SwiftShader WebGPU did not re-zero a loop-local array
        // on every iteration (tests/kernels.rs caught it in the browser).
        var s: array<f32, 8>;
        for (var r = 0u; r < GROUP; r++) {
            s[r] = 0.0;
        }
        for (var i = 0u; i < hd4; i++) {
            let k = kv_at(true, base, i, j, own, krow);
            for (var r = 0u; r < GROUP; r++) {
                s[r] += dot(qv[r * hd4 + i], k);
            }
        }
        var corr: array<f32, 8>;
        var e: array<f32, 8>;
        for (var r = 0u; r < GROUP; r++) {
            let m_new = max(m[r], s[r]);
            corr[r] = exp(m[r] - m_new);
            e[r] = exp(s[r] - m_new);
            l[r] = l[r] * corr[r] + e[r];
            m[r] = m_new;
        }
        for (var i = 0u; i < hd4; i++) {
            let v = kv_at(false, base, i, j, own, krow);
            for (var r = 0u; r < GROUP; r++) {
                acc[r * hd4 + i] = acc[r * hd4 + i] * corr[r] + e[r] * v;
            }
        }
        base += p.hd / 2u;
    }
    for (var r = 0u; r < GROUP; r++) {
        for (var i = 0u; i < hd4; i++) {
            put_result(t * p.n_head + h0 + r, split, i, acc[r * hd4 + i], m[r], l[r], i == 0u);
        }
    }
}

// Merges the `splits` partials of each (token, head): out = Σ_s acc_s·e^(m_s − M) / Σ_s l_s·e^(m_s − M).
// An invocation per (token, head, quad of the head): a decode step's few heads still spread over
// many invocations (one per head left a GPU's single workgroup walking every quad in turn). Each
// invocation sums in the same order as one per head did, so the result is the same bit for bit.
@compute @workgroup_size(64)
fn combine(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let hd4 = p.hd / 4u;
    let idx = gid.x + gid.y * nw.x * 64u;
    if idx >= p.t * p.n_head * hd4 {
        return;
    }
    let th = idx / hd4;
    let i = idx % hd4;
    let stride = hd4 + 1u;
    let base = th * p.splits * stride;
    var mx = -3.0e38;
    for (var s = 0u; s < p.splits; s++) {
        let ml = part[base + s * stride + hd4];
        if ml.y > 0.0 {
            mx = max(mx, ml.x);
        }
    }
    var l = 0.0;
    for (var s = 0u; s < p.splits; s++) {
        let ml = part[base + s * stride + hd4];
        if ml.y > 0.0 {
            l += ml.y * exp(ml.x - mx);
        }
    }
    var a = vec4<f32>(0.0);
    for (var s = 0u; s < p.splits; s++) {
        let ml = part[base + s * stride + hd4];
        if ml.y > 0.0 {
            a += part[base + s * stride + i] * exp(ml.x - mx);
        }
    }
    out[th * hd4 + i] = a / l;
}

// `coop` (GPUs): a 64-lane workgroup per (token, head, slice) — no per-invocation arrays. The q
// row goes to workgroup memory; lanes score the slice's positions (at most 256) into workgroup
// memory; a workgroup reduction gives max and sum; then lane (d, g) sums V column quad d over
// positions g, g + LG, … and the LG partial sums are added. Same slices, same partials and the
// same FUSED behaviour as `main`, so `combine` merges them unchanged.
const CL: u32 = 64u;
const MAX_SPAN: u32 = 256u;
var<workgroup> w_q: array<vec4<f32>, 64>; // hd/4 ≤ 64 = CL
var<workgroup> w_s: array<f32, MAX_SPAN>;
var<workgroup> w_red: array<vec4<f32>, CL>;

@compute @workgroup_size(CL)
fn coop(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let idx = wid.x + wid.y * nwg.x;
    if idx >= p.t * p.n_head * p.splits {
        return;
    }
    let split = idx % p.splits;
    let th = idx / p.splits;
    let t = th / p.n_head;
    let h = th % p.n_head;
    let g = h / (p.n_head / p.n_kv);
    let hd4 = p.hd / 4u;
    let own = pos[t];
    let n = own + 1u;
    let per = select((n + p.splits - 1u) / p.splits, p.span, p.span > 0u);
    let start = min(n, max(split * per, first_pos(n)));
    let end = min(n, (split + 1u) * per);
    let krow = (t * p.q_stride + (p.n_head + g) * p.hd) / 4u;
    if lid < hd4 {
        var qq = q[(t * p.q_stride + h * p.hd) / 4u + lid];
        if FUSED == 1u {
            qq = rotate(qq, own, lid);
            // The first query head of each KV head writes the token's K/V into its page.
            if h % (p.n_head / p.n_kv) == 0u && start <= own && own < end {
                write_own(kv_base(own, g), krow, own, lid);
            }
        }
        w_q[lid] = qq * p.scale;
    }
    workgroupBarrier();
    // Scores, and each lane's max.
    var mx = -3.0e38;
    for (var j = start + lid; j < end; j += CL) {
        let base = kv_base(j, g);
        var s = 0.0;
        for (var i = 0u; i < hd4; i++) {
            s += dot(w_q[i], kv_at(true, base, i, j, own, krow));
        }
        w_s[j - start] = s;
        mx = max(mx, s);
    }
    w_red[lid] = vec4<f32>(mx, 0.0, 0.0, 0.0);
    for (var r = CL / 2u; r > 0u; r /= 2u) {
        workgroupBarrier();
        if lid < r {
            w_red[lid].x = max(w_red[lid].x, w_red[lid + r].x);
        }
    }
    workgroupBarrier();
    let m = w_red[0].x;
    workgroupBarrier();
    // Weights e^(s − m) and their sum.
    var l = 0.0;
    for (var j = start + lid; j < end; j += CL) {
        let e = exp(w_s[j - start] - m);
        w_s[j - start] = e;
        l += e;
    }
    w_red[lid] = vec4<f32>(l, 0.0, 0.0, 0.0);
    for (var r = CL / 2u; r > 0u; r /= 2u) {
        workgroupBarrier();
        if lid < r {
            w_red[lid].x += w_red[lid + r].x;
        }
    }
    workgroupBarrier();
    let total = w_red[0].x;
    workgroupBarrier();
    // Σ_j e_j · v_j: lane (d, grp) takes column quad d of positions start + grp, + lg, …
    let lg = CL / hd4;
    let d = lid % hd4;
    let grp = lid / hd4;
    var acc = vec4<f32>(0.0);
    if grp < lg {
        for (var j = start + grp; j < end; j += lg) {
            let base = kv_base(j, g);
            acc += w_s[j - start] * kv_at(false, base, d, j, own, krow);
        }
    }
    w_red[lid] = acc;
    workgroupBarrier();
    if lid < hd4 {
        var a = vec4<f32>(0.0);
        for (var r = 0u; r < lg; r++) {
            a += w_red[r * hd4 + lid];
        }
        // An empty slice has sum 0: combine skips it.
        put_result(th, split, lid, a, select(-3.0e38, m, end > start), select(0.0, total, end > start), lid == 0u);
    }
}
