// Causal grouped-query attention over paged KV, for CPU adapters with fixed-size subgroups
// (lavapipe: a subgroup is one AVX2 vector of 8 lanes). Same arithmetic, bindings, slices and
// partials as attention.wgsl's `main`, so its `combine` merges them unchanged:
//   out[t, h] = Σ_j softmax_j(q[t, h] · k[j, g] / √hd) · v[j, g],  j = 0 ..= pos[t].
//
// Why a variant: `main` gives each invocation a whole (token, query heads, slice) and keeps q and
// the accumulators of its heads in private arrays indexed at run time. lavapipe 25.0 keeps such
// arrays in memory and moves them lane by lane, 9 array words for every K/V word read. Here a
// cluster of L lanes (inside one subgroup) shares an item: lane `lane` owns the QPL quads
// lane, lane + L, … of the head dimension, for up to 4 query heads that share a KV head. q and the
// accumulators are mat4x4 values (a column per head) named one per quad and indexed only by
// constants, so they stay in vector registers. A score is the lanes' partial dot products summed
// with subgroupShuffleXor inside the cluster; the four heads' scores, maxima and sums are vec4s.
//
// This file is appended to attention.wgsl (ops.rs concatenates them), whose bindings, `rotate`,
// `f16_round`, `kv_base`, `kv_at`, `write_own`, FUSED, GROUP (here 1–4) and WG it uses: a
// module of its own, because subgroup operations need the device's SUBGROUP feature. No
// `enable subgroups;`: naga (wgpu 30) rejects it, so the kernel is used natively only.

// Lanes per item (a power of two that divides the subgroup size) and quads per lane (1–4, so
// head dim = 4 · L · QPL).
override L: u32 = 8u;
override QPL: u32 = 2u;

// Quad i of query heads h0 .. h0 + GROUP - 1 of token t, scaled (and rotated when FUSED), as the
// columns of a matrix (zero past GROUP).
fn load_q(t: u32, h0: u32, i: u32, own: u32) -> mat4x4<f32> {
    var m = mat4x4<f32>();
    for (var r = 0u; r < GROUP; r++) {
        var qq = q[(t * p.q_stride + (h0 + r) * p.hd) / 4u + i];
        if FUSED == 1u {
            qq = rotate(qq, own, i);
        }
        m[r] = qq * p.scale;
    }
    return m;
}

// Column r of `a` rescaled by corr[r], plus e[r]·v: one position's update of four heads' sums.
fn update(a: mat4x4<f32>, v: vec4<f32>, corr: vec4<f32>, e: vec4<f32>) -> mat4x4<f32> {
    return mat4x4<f32>(a[0] * corr.x + v * e.x, a[1] * corr.y + v * e.y, a[2] * corr.z + v * e.z, a[3] * corr.w + v * e.w);
}

// Column r of the accumulator for quad i, to `out` (one slice) or to the partials.
fn store(t: u32, h0: u32, r: u32, i: u32, split: u32, a: vec4<f32>, m: f32, l: f32, lane: u32) {
    let hd4 = p.hd / 4u;
    let th = t * p.n_head + h0 + r;
    if p.splits == 1u {
        out[th * hd4 + i] = a / l;
    } else {
        let pb = (th * p.splits + split) * (hd4 + 1u);
        part[pb + i] = a;
        if lane == 0u {
            part[pb + hd4] = vec4<f32>(m, l, 0.0, 0.0);
        }
    }
}

@compute @workgroup_size(WG)
fn lanes(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let item = (wid.x + wid.y * nw.x) * (WG / L) + lid / L;
    let lane = lid % L;
    let groups = p.n_head / GROUP;
    // A whole cluster leaves together: the shuffles below only read lanes of their own item.
    if item >= p.t * groups * p.splits {
        return;
    }
    let split = item % p.splits;
    let tg = item / p.splits;
    let t = tg / groups;
    let h0 = (tg % groups) * GROUP;
    let g = h0 / (p.n_head / p.n_kv);
    let own = pos[t];
    var q0 = load_q(t, h0, lane, own);
    var q1 = mat4x4<f32>();
    var q2 = mat4x4<f32>();
    var q3 = mat4x4<f32>();
    if QPL > 1u {
        q1 = load_q(t, h0, lane + L, own);
    }
    if QPL > 2u {
        q2 = load_q(t, h0, lane + 2u * L, own);
    }
    if QPL > 3u {
        q3 = load_q(t, h0, lane + 3u * L, own);
    }
    var a0 = mat4x4<f32>();
    var a1 = mat4x4<f32>();
    var a2 = mat4x4<f32>();
    var a3 = mat4x4<f32>();
    var m = vec4<f32>(-3.0e38);
    var l = vec4<f32>(0.0);
    let n = own + 1u;
    let per = select((n + p.splits - 1u) / p.splits, p.span, p.span > 0u);
    let start = split * per;
    let end = min(n, (split + 1u) * per);
    // The token's own K row in q (its V row follows the n_kv K heads).
    let krow = (t * p.q_stride + (p.n_head + g) * p.hd) / 4u;
    if FUSED == 1u && h0 % (p.n_head / p.n_kv) == 0u && start <= own && own < end {
        let base = kv_base(own, g);
        for (var k = 0u; k < QPL; k++) {
            write_own(base, krow, own, lane + k * L);
        }
    }
    for (var j = start; j < end; j++) {
        let base = kv_base(j, g);
        // vec4 · mat4x4: the dot product of this lane's K quad with each head's q quad.
        var s = kv_at(true, base, lane, j, own, krow) * q0;
        if QPL > 1u {
            s += kv_at(true, base, lane + L, j, own, krow) * q1;
        }
        if QPL > 2u {
            s += kv_at(true, base, lane + 2u * L, j, own, krow) * q2;
        }
        if QPL > 3u {
            s += kv_at(true, base, lane + 3u * L, j, own, krow) * q3;
        }
        for (var o = L / 2u; o > 0u; o /= 2u) {
            s += subgroupShuffleXor(s, o);
        }
        let m_new = max(m, s);
        let corr = exp(m - m_new);
        let e = exp(s - m_new);
        l = l * corr + e;
        m = m_new;
        a0 = update(a0, kv_at(false, base, lane, j, own, krow), corr, e);
        if QPL > 1u {
            a1 = update(a1, kv_at(false, base, lane + L, j, own, krow), corr, e);
        }
        if QPL > 2u {
            a2 = update(a2, kv_at(false, base, lane + 2u * L, j, own, krow), corr, e);
        }
        if QPL > 3u {
            a3 = update(a3, kv_at(false, base, lane + 3u * L, j, own, krow), corr, e);
        }
    }
    for (var r = 0u; r < GROUP; r++) {
        store(t, h0, r, lane, split, a0[r], m[r], l[r], lane);
        if QPL > 1u {
            store(t, h0, r, lane + L, split, a1[r], m[r], l[r], lane);
        }
        if QPL > 2u {
            store(t, h0, r, lane + 2u * L, split, a2[r], m[r], l[r], lane);
        }
        if QPL > 3u {
            store(t, h0, r, lane + 3u * L, split, a3[r], m[r], l[r], lane);
        }
    }
}
