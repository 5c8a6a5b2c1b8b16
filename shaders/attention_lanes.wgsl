// Causal grouped-query attention over paged KV, for CPU adapters with fixed-size subgroups
// (lavapipe: a subgroup is one AVX2 vector of 8 lanes). Same arithmetic, bindings, slices and
// partials as attention.wgsl's `main`, so its `combine` merges them unchanged:
//   out[t, h] = Σ_j softmax_j(q[t, h] · k[j, g] / √hd) · v[j, g],  j = 0 ..= pos[t].
//
// Why a variant: `main` gives each invocation a whole (token, query heads, slice) and keeps q and
// the accumulators of its heads in private arrays indexed at run time. lavapipe 25.0 keeps such
// arrays in memory and moves them lane by lane, 9 array words for every K/V word read. Here a
// cluster of L lanes (inside one subgroup) shares an item: 4·SETS query rows that share a KV head
// (the rows (t, h) of KV head g in order t·ratio + h % ratio: the heads of one decode token, or
// the heads of neighbouring prefill tokens), one slice of positions. Lane `lane` owns the QPL
// quads lane, lane + L, … of the head dimension. q and the sums are mat4x4 values (a column per
// row) named one per quad and indexed only by constants, so they stay in vector registers. Each
// K/V word a lane loads serves all 4·SETS rows. A score is the lanes' partial dot products summed
// with subgroupShuffleXor inside the cluster; four rows' scores, maxima and sums are vec4s.
//
// This file is appended to attention.wgsl (ops/attention.rs concatenates them), whose bindings, `rotate`,
// `f16_round`, `kv_base`, `kv_at`, `write_own`, `put_result`, FUSED and WG it uses: a
// module of its own, because subgroup operations and u64 need the device's SUBGROUP and
// SHADER_INT64 features. No `enable subgroups;`: naga (wgpu 30) rejects it, and WebGPU has no
// u64, so the kernel is used natively only.

// Lanes per item (a power of two that divides the subgroup size) and quads per lane (1–8, so
// head dim = 4 · L · QPL: 8 for Gemma-3's heads of 256 on 8 lanes).
override L: u32 = 8u;
override QPL: u32 = 2u;
// Sets of 4 query rows per item (1, 2 or 4).
override SETS: u32 = 1u;
// 1: items of 8 lanes that are a whole subgroup (L 8, WG 8), each lane keeping the softmax state
// of its own rows only (`step_wide`).
override WIDE: u32 = 0u;

// Four query rows (t, h) of KV head g, items f .. f + 3 in t·ratio + h % ratio order, over one
// slice of positions: q and sums (a column per row), online-softmax max and sum, and the positions
// [lo, hi) each row reads in the slice (empty for rows past the last token).
struct Rows {
    q0: mat4x4<f32>,
    q1: mat4x4<f32>,
    q2: mat4x4<f32>,
    q3: mat4x4<f32>,
    q4: mat4x4<f32>,
    q5: mat4x4<f32>,
    q6: mat4x4<f32>,
    q7: mat4x4<f32>,
    a0: mat4x4<f32>,
    a1: mat4x4<f32>,
    a2: mat4x4<f32>,
    a3: mat4x4<f32>,
    a4: mat4x4<f32>,
    a5: mat4x4<f32>,
    a6: mat4x4<f32>,
    a7: mat4x4<f32>,
    m: vec4<f32>,
    l: vec4<f32>,
    lo: vec4<u32>,
    hi: vec4<u32>,
}

fn ratio() -> u32 {
    return p.n_head / p.n_kv;
}

// Quad i of row f's q, scaled (and rotated when FUSED).
fn q_quad(f: u32, g: u32, i: u32) -> vec4<f32> {
    let t = f / ratio();
    let h = g * ratio() + f % ratio();
    var qq = q[(t * p.q_stride + h * p.hd) / 4u + i];
    if FUSED == 1u {
        qq = rotate(qq, pos[t], i);
    }
    return qq * p.scale;
}

fn rows_init(f0: u32, g: u32, lane: u32, split: u32) -> Rows {
    var r: Rows;
    r.m = vec4<f32>(-3.0e38);
    r.l = vec4<f32>(0.0);
    r.lo = vec4<u32>(0xffffffffu);
    r.hi = vec4<u32>(0u);
    for (var c = 0u; c < 4u; c++) {
        let f = f0 + c;
        if f >= p.t * ratio() {
            break;
        }
        let n = pos[f / ratio()] + 1u;
        let per = select((n + p.splits - 1u) / p.splits, p.span, p.span > 0u);
        r.lo[c] = max(split * per, first_pos(n));
        r.hi[c] = min(n, (split + 1u) * per);
        r.q0[c] = q_quad(f, g, lane);
        if QPL > 1u {
            r.q1[c] = q_quad(f, g, lane + L);
        }
        if QPL > 2u {
            r.q2[c] = q_quad(f, g, lane + 2u * L);
        }
        if QPL > 3u {
            r.q3[c] = q_quad(f, g, lane + 3u * L);
        }
        if QPL > 4u {
            r.q4[c] = q_quad(f, g, lane + 4u * L);
        }
        if QPL > 5u {
            r.q5[c] = q_quad(f, g, lane + 5u * L);
        }
        if QPL > 6u {
            r.q6[c] = q_quad(f, g, lane + 6u * L);
        }
        if QPL > 7u {
            r.q7[c] = q_quad(f, g, lane + 7u * L);
        }
    }
    return r;
}

// Column r of `a` rescaled by corr[r], plus e[r]·v: one position's update of four rows' sums.
fn update(a: mat4x4<f32>, v: vec4<f32>, corr: vec4<f32>, e: vec4<f32>) -> mat4x4<f32> {
    return mat4x4<f32>(a[0] * corr.x + v * e.x, a[1] * corr.y + v * e.y, a[2] * corr.z + v * e.z, a[3] * corr.w + v * e.w);
}

// vec4 · mat4x4: this lane's K quads (k: 0..3, k2: 4..7) dotted with each of a set's four rows'
// q quads.
fn partial(r: Rows, k: mat4x4<f32>, k2: mat4x4<f32>) -> vec4<f32> {
    var s = k[0] * r.q0;
    if QPL > 1u {
        s += k[1] * r.q1;
    }
    if QPL > 2u {
        s += k[2] * r.q2;
    }
    if QPL > 3u {
        s += k[3] * r.q3;
    }
    if QPL > 4u {
        s += k2[0] * r.q4;
    }
    if QPL > 5u {
        s += k2[1] * r.q5;
    }
    if QPL > 6u {
        s += k2[2] * r.q6;
    }
    if QPL > 7u {
        s += k2[3] * r.q7;
    }
    return s;
}

// A set's sums updated for one position: column r rescaled by corr[r], plus e[r]·v (v: quads
// 0..3, v2: 4..7).
fn update_set(r: ptr<function, Rows>, v: mat4x4<f32>, v2: mat4x4<f32>, corr: vec4<f32>, e: vec4<f32>) {
    (*r).a0 = update((*r).a0, v[0], corr, e);
    if QPL > 1u {
        (*r).a1 = update((*r).a1, v[1], corr, e);
    }
    if QPL > 2u {
        (*r).a2 = update((*r).a2, v[2], corr, e);
    }
    if QPL > 3u {
        (*r).a3 = update((*r).a3, v[3], corr, e);
    }
    if QPL > 4u {
        (*r).a4 = update((*r).a4, v2[0], corr, e);
    }
    if QPL > 5u {
        (*r).a5 = update((*r).a5, v2[1], corr, e);
    }
    if QPL > 6u {
        (*r).a6 = update((*r).a6, v2[2], corr, e);
    }
    if QPL > 7u {
        (*r).a7 = update((*r).a7, v2[3], corr, e);
    }
}

// Position j (this lane's K and V quads, a column per quad; k2, v2: quads 4..7) for the four rows.
fn rows_step(r0: Rows, k: mat4x4<f32>, k2: mat4x4<f32>, v: mat4x4<f32>, v2: mat4x4<f32>, j: u32) -> Rows {
    var r = r0;
    var s = partial(r, k, k2);
    for (var o = L / 2u; o > 0u; o /= 2u) {
        s += subgroupShuffleXor(s, o);
    }
    let valid = (vec4<u32>(j) >= r.lo) & (vec4<u32>(j) < r.hi);
    // One exp a row: exp(m − max(m, s)) and exp(s − max(m, s)) are e^−|s − m| and 1, one way or
    // the other. Rows for which j is outside [lo, hi) keep their state.
    let up = valid & (s > r.m);
    let x = exp(select(s - r.m, r.m - s, up));
    let corr = select(vec4<f32>(1.0), x, up);
    let e = select(vec4<f32>(0.0), select(x, vec4<f32>(1.0), up), valid);
    r.m = select(r.m, max(r.m, s), valid);
    r.l = r.l * corr + e;
    update_set(&r, v, v2, corr, e);
    return r;
}

// WIDE (8 lanes an item, the whole subgroup): after the dot products, the lanes' partial scores
// are summed by a butterfly that halves what each lane keeps at every step (the same sums, in
// the same order, as `rows_step`'s xor reduction), so that each lane ends with the whole scores
// of its own rows: with 16 rows (SETS 4) rows 2λ and 2λ + 1, with 8 rows row λ, with 4 rows row
// λ / 2 (lanes λ and λ ^ 1 alike). Only those rows' softmax state is kept in a lane (two exps a
// lane, not 4·SETS), and each row's rescale and weight are broadcast back from its lane for the
// updates of the sums. `Own` holds that state (with fewer than 16 rows, twice the same row).
struct Own {
    m: vec2<f32>,
    l: vec2<f32>,
    lo: vec2<u32>,
    hi: vec2<u32>,
}

// This lane's own rows' entries of the sets' vec4s a, b, c, d (rows 0–3, 4–7, 8–11, 12–15).
fn own_of(a: vec4<u32>, b: vec4<u32>, c: vec4<u32>, d: vec4<u32>, lane: u32) -> vec2<u32> {
    if SETS == 4u {
        let s = select(select(a, b, (lane & 2u) != 0u), select(c, d, (lane & 2u) != 0u), (lane & 4u) != 0u);
        return select(s.xy, s.zw, (lane & 1u) != 0u);
    }
    if SETS == 2u {
        return vec2<u32>(select(a, b, (lane & 4u) != 0u)[lane & 3u]);
    }
    return vec2<u32>(a[lane >> 1u]);
}

// Rows 4·si .. 4·si + 3's entries of `v` (each lane holding its own rows'), from their lanes.
fn gather(v: vec2<f32>, si: u32) -> vec4<f32> {
    if SETS == 4u {
        switch si {
            case 0u: { return vec4<f32>(subgroupBroadcast(v, 0u), subgroupBroadcast(v, 1u)); }
            case 1u: { return vec4<f32>(subgroupBroadcast(v, 2u), subgroupBroadcast(v, 3u)); }
            case 2u: { return vec4<f32>(subgroupBroadcast(v, 4u), subgroupBroadcast(v, 5u)); }
            default: { return vec4<f32>(subgroupBroadcast(v, 6u), subgroupBroadcast(v, 7u)); }
        }
    }
    if SETS == 2u {
        if si == 0u {
            return vec4<f32>(subgroupBroadcast(v.x, 0u), subgroupBroadcast(v.x, 1u), subgroupBroadcast(v.x, 2u), subgroupBroadcast(v.x, 3u));
        }
        return vec4<f32>(subgroupBroadcast(v.x, 4u), subgroupBroadcast(v.x, 5u), subgroupBroadcast(v.x, 6u), subgroupBroadcast(v.x, 7u));
    }
    return vec4<f32>(subgroupBroadcast(v.x, 0u), subgroupBroadcast(v.x, 2u), subgroupBroadcast(v.x, 4u), subgroupBroadcast(v.x, 6u));
}

// WIDE: position j (this lane's K and V quads) for every row of the item.
fn step_wide(ra: ptr<function, Rows>, rb: ptr<function, Rows>, rc: ptr<function, Rows>, rd: ptr<function, Rows>, o: ptr<function, Own>,
             k: mat4x4<f32>, k2: mat4x4<f32>, v: mat4x4<f32>, v2: mat4x4<f32>, j: u32, lane: u32) {
    let b2 = (lane & 4u) != 0u;
    let b1 = (lane & 2u) != 0u;
    let b0 = (lane & 1u) != 0u;
    let sa = partial(*ra, k, k2);
    var s: vec2<f32>;
    if SETS == 4u {
        let sb = partial(*rb, k, k2);
        let sc = partial(*rc, k, k2);
        let sd = partial(*rd, k, k2);
        let k0 = select(sa, sc, b2) + subgroupShuffleXor(select(sc, sa, b2), 4u);
        let k1 = select(sb, sd, b2) + subgroupShuffleXor(select(sd, sb, b2), 4u);
        let k2 = select(k0, k1, b1) + subgroupShuffleXor(select(k1, k0, b1), 2u);
        s = select(k2.xy, k2.zw, b0) + subgroupShuffleXor(select(k2.zw, k2.xy, b0), 1u);
    } else if SETS == 2u {
        let sb = partial(*rb, k, k2);
        let k0 = select(sa, sb, b2) + subgroupShuffleXor(select(sb, sa, b2), 4u);
        let k1 = select(k0.xy, k0.zw, b1) + subgroupShuffleXor(select(k0.zw, k0.xy, b1), 2u);
        s = vec2<f32>(select(k1.x, k1.y, b0) + subgroupShuffleXor(select(k1.y, k1.x, b0), 1u));
    } else {
        let k0 = select(sa.xy, sa.zw, b2) + subgroupShuffleXor(select(sa.zw, sa.xy, b2), 4u);
        let k1 = select(k0.x, k0.y, b1) + subgroupShuffleXor(select(k0.y, k0.x, b1), 2u);
        s = vec2<f32>(k1 + subgroupShuffleXor(k1, 1u));
    }
    // rows_step's softmax update, for this lane's rows.
    let valid = (vec2<u32>(j) >= (*o).lo) & (vec2<u32>(j) < (*o).hi);
    let up = valid & (s > (*o).m);
    let x = exp(select(s - (*o).m, (*o).m - s, up));
    let corr = select(vec2<f32>(1.0), x, up);
    let e = select(vec2<f32>(0.0), select(x, vec2<f32>(1.0), up), valid);
    (*o).m = select((*o).m, max((*o).m, s), valid);
    (*o).l = (*o).l * corr + e;
    update_set(ra, v, v2, gather(corr, 0u), gather(e, 0u));
    if SETS > 1u {
        update_set(rb, v, v2, gather(corr, 1u), gather(e, 1u));
    }
    if SETS > 2u {
        update_set(rc, v, v2, gather(corr, 2u), gather(e, 2u));
        update_set(rd, v, v2, gather(corr, 3u), gather(e, 3u));
    }
}

fn rows_store(r: Rows, f0: u32, g: u32, lane: u32, split: u32) {
    for (var c = 0u; c < 4u; c++) {
        let f = f0 + c;
        if f >= p.t * ratio() {
            break;
        }
        let th = (f / ratio()) * p.n_head + g * ratio() + f % ratio();
        put_result(th, split, lane, r.a0[c], r.m[c], r.l[c], lane == 0u);
        if QPL > 1u {
            put_result(th, split, lane + L, r.a1[c], r.m[c], r.l[c], lane == 0u);
        }
        if QPL > 2u {
            put_result(th, split, lane + 2u * L, r.a2[c], r.m[c], r.l[c], lane == 0u);
        }
        if QPL > 3u {
            put_result(th, split, lane + 3u * L, r.a3[c], r.m[c], r.l[c], lane == 0u);
        }
        if QPL > 4u {
            put_result(th, split, lane + 4u * L, r.a4[c], r.m[c], r.l[c], lane == 0u);
        }
        if QPL > 5u {
            put_result(th, split, lane + 5u * L, r.a5[c], r.m[c], r.l[c], lane == 0u);
        }
        if QPL > 6u {
            put_result(th, split, lane + 6u * L, r.a6[c], r.m[c], r.l[c], lane == 0u);
        }
        if QPL > 7u {
            put_result(th, split, lane + 7u * L, r.a7[c], r.m[c], r.l[c], lane == 0u);
        }
    }
}

// The pages again, a quad (two words) one u64: lavapipe loads a storage word whose address
// differs across lanes in a loop over the lanes, so one 8-byte load costs what a 4-byte one does.
// Only read, but bound read_write: wgpu refuses a buffer bound both read-only and read_write in
// one dispatch (k_pages and v_pages are read_write for `write_own`).
@group(0) @binding(9) var<storage, read_write> k64: array<u64>;  // the same buffer as k_pages
@group(0) @binding(10) var<storage, read_write> v64: array<u64>; // the same buffer as v_pages

// kv_at, the pages read as u64 (`base` is even: rows are hd/2 words, hd a multiple of 4).
fn kv_at64(is_k: bool, base: u32, i: u32, j: u32, own: u32, row: u32) -> vec4<f32> {
    if FUSED == 1u && j == own {
        return kv_at(is_k, base, i, j, own, row);
    }
    var w: u64;
    if is_k {
        w = k64[base / 2u + i];
    } else {
        w = v64[base / 2u + i];
    }
    return vec4<f32>(unpack2x16float(u32(w)), unpack2x16float(u32(w >> 32u)));
}

// The lane's K (or V) quads m0 .. m0 + 3 (m0: 0 or 4; those below QPL) of position j, a column
// per quad.
fn kv_quads(is_k: bool, base: u32, lane: u32, m0: u32, j: u32, own: u32, krow: u32) -> mat4x4<f32> {
    var k = mat4x4<f32>();
    if QPL > m0 {
        k[0] = kv_at64(is_k, base, lane + m0 * L, j, own, krow);
    }
    if QPL > m0 + 1u {
        k[1] = kv_at64(is_k, base, lane + (m0 + 1u) * L, j, own, krow);
    }
    if QPL > m0 + 2u {
        k[2] = kv_at64(is_k, base, lane + (m0 + 2u) * L, j, own, krow);
    }
    if QPL > m0 + 3u {
        k[3] = kv_at64(is_k, base, lane + (m0 + 3u) * L, j, own, krow);
    }
    return k;
}

@compute @workgroup_size(WG)
fn lanes(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let item = (wid.x + wid.y * nw.x) * (WG / L) + lid / L;
    let lane = lid % L;
    let chunks = (p.t * ratio() + 4u * SETS - 1u) / (4u * SETS);
    // A whole cluster leaves together: the shuffles below only read lanes of their own item.
    if item >= p.n_kv * chunks * p.splits {
        return;
    }
    let split = item % p.splits;
    let chunk = (item / p.splits) % chunks;
    let g = item / (p.splits * chunks);
    let f0 = chunk * 4u * SETS;
    var ra = rows_init(f0, g, lane, split);
    var rb = Rows();
    var rc = Rows();
    var rd = Rows();
    // The sets' first and last positions, inline: helpers taking a Rows by value made this kernel
    // slower on lavapipe (measured: 121–159 ms against 119–122 in the warm pass).
    var lo = min(min(ra.lo.x, ra.lo.y), min(ra.lo.z, ra.lo.w));
    var hi = max(max(ra.hi.x, ra.hi.y), max(ra.hi.z, ra.hi.w));
    if SETS > 1u {
        rb = rows_init(f0 + 4u, g, lane, split);
        lo = min(lo, min(min(rb.lo.x, rb.lo.y), min(rb.lo.z, rb.lo.w)));
        hi = max(hi, max(max(rb.hi.x, rb.hi.y), max(rb.hi.z, rb.hi.w)));
    }
    if SETS > 2u {
        rc = rows_init(f0 + 8u, g, lane, split);
        rd = rows_init(f0 + 12u, g, lane, split);
        lo = min(lo, min(min(min(rc.lo.x, rc.lo.y), min(rc.lo.z, rc.lo.w)), min(min(rd.lo.x, rd.lo.y), min(rd.lo.z, rd.lo.w))));
        hi = max(hi, max(max(max(rc.hi.x, rc.hi.y), max(rc.hi.z, rc.hi.w)), max(max(rd.hi.x, rd.hi.y), max(rd.hi.z, rd.hi.w))));
    }
    // FUSED (one token): its own position, and its K row in q (the V row follows the n_kv K heads).
    let own = pos[f0 / ratio()];
    let krow = ((f0 / ratio()) * p.q_stride + (p.n_head + g) * p.hd) / 4u;
    if FUSED == 1u && ra.lo.x <= own && own < ra.hi.x {
        let base = kv_base(own, g);
        for (var k = 0u; k < QPL; k++) {
            write_own(base, krow, own, lane + k * L);
        }
    }
    // The page table is read once a page: positions of a page are consecutive rows.
    var base = kv_base(lo, g);
    var o: Own;
    if WIDE == 1u {
        o.m = vec2<f32>(-3.0e38);
        o.l = vec2<f32>(0.0);
        o.lo = own_of(ra.lo, rb.lo, rc.lo, rd.lo, lane);
        o.hi = own_of(ra.hi, rb.hi, rc.hi, rd.hi, lane);
    }
    for (var j = lo; j < hi; j++) {
        if j % p.page == 0u {
            base = kv_base(j, g);
        }
        let kq = kv_quads(true, base, lane, 0u, j, own, krow);
        let vq = kv_quads(false, base, lane, 0u, j, own, krow);
        let kq2 = kv_quads(true, base, lane, 4u, j, own, krow);
        let vq2 = kv_quads(false, base, lane, 4u, j, own, krow);
        if WIDE == 1u {
            step_wide(&ra, &rb, &rc, &rd, &o, kq, kq2, vq, vq2, j, lane);
        } else {
            ra = rows_step(ra, kq, kq2, vq, vq2, j);
            if SETS > 1u {
                rb = rows_step(rb, kq, kq2, vq, vq2, j);
            }
            if SETS > 2u {
                rc = rows_step(rc, kq, kq2, vq, vq2, j);
                rd = rows_step(rd, kq, kq2, vq, vq2, j);
            }
        }
        base += p.hd / 2u;
    }
    if WIDE == 1u {
        // Each row's maximum and sum, from its lane (sets past SETS are not stored).
        ra.m = gather(o.m, 0u);
        ra.l = gather(o.l, 0u);
        rb.m = gather(o.m, 1u);
        rb.l = gather(o.l, 1u);
        rc.m = gather(o.m, 2u);
        rc.l = gather(o.l, 2u);
        rd.m = gather(o.m, 3u);
        rd.l = gather(o.l, 3u);
    }
    rows_store(ra, f0, g, lane, split);
    if SETS > 1u {
        rows_store(rb, f0 + 4u, g, lane, split);
    }
    if SETS > 2u {
        rows_store(rc, f0 + 8u, g, lane, split);
        rows_store(rd, f0 + 12u, g, lane, split);
    }
}
