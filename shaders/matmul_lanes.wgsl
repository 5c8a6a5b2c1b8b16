// Matrix-vector product for CPU adapters with subgroups of at least 8 lanes and 64-bit integers
// (ops::Variant::Lanes), and a tiled matmul (`matmul_lanes`), for every block format: FMT_Q8_0
// and FMT_Q4_1 (the `lanes` column of FORMATS) with products of their own, the others
// decoded by quant.wgsl's `chunk_values`. Appended to quant.wgsl and matmul.wgsl (ops/matmul.rs
// concatenates them), whose layout, bindings, x_at, dot_words, finish, store, FORMAT, XLOAD, ACC,
// WG, G and R it uses: a module of its own, because subgroup operations and u64 need the
// device's SUBGROUP and SHADER_INT64 features (no `enable subgroups;`: naga, wgpu 30, rejects
// it, and WebGPU has no u64, so the kernels are used natively only).
//
// As `matvec`, each invocation computes rows of token t, but 8 neighbouring ones (n0 .. n0 + 7),
// and with two kinds of sharing that lavapipe 25.0 needs: it loads a storage value with a loop
// over the 8 lanes of its vector, ~11 instructions a lane whatever the width, so the kernel makes
// fewer and wider loads.
// - x: `matvec` has every lane load all 32 x values of a block for its rows; here lane l of each
//   8 loads (and normalises, or gates) quad l % 8 of the block once, and subgroupBroadcast hands
//   the 8 quads to every lane: the x loads a block drop from 32 a lane to 4.
// - W: the layout interleaves rows (word j of rows 8m .. 8m + 7 side by side), so one
//   vec4<u64> load, 32 bytes, serves the products of all 8 rows (and their headers:
//   `header_rows8`). On lavapipe: a u64 a pair of rows was 1.2–3.1× faster than a row at a time
//   (docs/BENCHMARKS.md, 2026-12-06); a vec4<u32> a row quad, then a vec4<u64> for 8, each faster
//   again (2026-12-07). Hence SHADER_INT64.
// - x as integers (XBITS > 0: Q2_K and Q3_K, the `x_bits` column of FORMATS): 2- and 3-bit values
//   make a byte hold 3 of them, and an f32 product costs lavapipe a shift, a mask, a conversion, a
//   multiply and an add a value, so these formats ran at ~1.7-1.9x Q4_1's time a byte. With x
//   rounded to integers (as llama.cpp's CPU backend rounds x to 8 bits for them), a u32 multiply
//   makes two products (`dot_int`). Q2_K's d and dmin are applied once a block (`q2k_block`), so
//   its d/dmin word is loaded once a block, not with each pair of chunks as its header in
//   quant.wgsl: a header word costs lavapipe as much as a weight word, and this took Q2_K from
//   ~1.4x Q4_1's time a byte to ~1.25x (docs/BENCHMARKS.md).
// - IQ4_NL and IQ4_XS look their 16 values up by a subgroup shuffle (`iq4_lanes`).
@group(0) @binding(5) var<storage, read> w64: array<u64>; // the same buffer as `w`
@group(0) @binding(6) var<storage, read> w256: array<vec4<u64>>; // and again

// Not 0: matvec_lanes rounds x to integers of XBITS bits (`int_chunk`, `dot_int`).
override XBITS: u32 = 0u;

@compute @workgroup_size(WG)
fn matvec_lanes(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(subgroup_invocation_id) sl: u32) {
    let t = wid.y;
    // G / 8 invocations a row group: invocation i takes rows 8·(i % 4) .. + 7 of group i / 4.
    let n0 = (gid.x / (G / 8u)) * G + 8u * (gid.x % (G / 8u));
    // No early return: every lane takes part in the broadcasts. Rows past N repeat the last 8
    // (some may be the layout's padding: it pads to whole row groups) and are not stored.
    let chunks = p.k / 32u;
    let rb = row_base(min(n0, (p.n - 1u) & ~7u));
    var acc: array<vec4<f32>, 8>;
    var xv: array<vec4<f32>, 8>;
    var xsum: vec4<f32>;
    // The integer path (XBITS > 0): the chunk's x (`int_chunk`), each row's sums of `dot_int`
    // (Q2_K: over the block so far; Q3_K: its result so far) and Q2_K's results of finished
    // blocks, and Q2_K's scale word for the chunk pair (the first word of its header, which is not
    // `hd` here: the second, d/dmin, is loaded once a block).
    var xi: IntX;
    var xp: array<vec2<u32>, 8>;
    var si: array<vec2<f32>, 8>;
    var acci: array<f32, 8>;
    var hs: array<u32, 8>;
    var hd: array<vec4<u32>, 8>; // as matvec's, for each row
    var ss = 0.0;
    let tab = iq4_table(sl);
    for (var c = 0u; c < chunks; c++) {
        let own = x_at(t, c * 8u + sl % 8u, &ss);
        if XBITS > 0u {
            xi = int_chunk(own, &xp);
        } else {
            xv[0] = subgroupBroadcast(own, 0u);
            xv[1] = subgroupBroadcast(own, 1u);
            xv[2] = subgroupBroadcast(own, 2u);
            xv[3] = subgroupBroadcast(own, 3u);
            xv[4] = subgroupBroadcast(own, 4u);
            xv[5] = subgroupBroadcast(own, 5u);
            xv[6] = subgroupBroadcast(own, 6u);
            xv[7] = subgroupBroadcast(own, 7u);
            xsum = xv[0] + xv[1] + xv[2] + xv[3] + xv[4] + xv[5] + xv[6] + xv[7];
        }
        if has_header() && FORMAT != FMT_Q2_K && c % header_period() == 0u {
            hd = header_rows8(rb, c);
        }
        if FORMAT == FMT_Q2_K && c % 2u == 0u {
            hs = words_rows8(header_word(rb, c, 0u));
        }
        // The rows' words, each word of the 8 one load; the products spelled out (acc, hd, and
        // the words at constant indices): with a helper picking row r's words out of the loaded
        // vec4<u64>s (for the headers too), lavapipe ran this kernel 1.2–2.5× slower.
        var q0: array<u32, 8>;
        var q1: array<u32, 8>;
        var q2: array<u32, 8>;
        var q3: array<u32, 8>;
        var q4: array<u32, 8>;
        var q5: array<u32, 8>;
        var q6: array<u32, 8>;
        var q7: array<u32, 8>;
        let bb = blk(rb, chunk_block(c));
        for (var i = 0u; i < chunk_words(); i++) {
            let v = words_rows8(bb + chunk_word(c, i) * G);
            q0[i] = v[0];
            q1[i] = v[1];
            q2[i] = v[2];
            q3[i] = v[3];
            q4[i] = v[4];
            q5[i] = v[5];
            q6[i] = v[6];
            q7[i] = v[7];
        }
        if XBITS > 0u {
            si[0] += dot_int(&q0, c, &xp, xi, hd[0], hs[0]);
            si[1] += dot_int(&q1, c, &xp, xi, hd[1], hs[1]);
            si[2] += dot_int(&q2, c, &xp, xi, hd[2], hs[2]);
            si[3] += dot_int(&q3, c, &xp, xi, hd[3], hs[3]);
            si[4] += dot_int(&q4, c, &xp, xi, hd[4], hs[4]);
            si[5] += dot_int(&q5, c, &xp, xi, hd[5], hs[5]);
            si[6] += dot_int(&q6, c, &xp, xi, hd[6], hs[6]);
            si[7] += dot_int(&q7, c, &xp, xi, hd[7], hs[7]);
            if FORMAT == FMT_Q2_K && c % 8u == 7u {
                // The block's end: its d and dmin (its header's second word) applied.
                let dw = words_rows8(header_word(rb, c, 1u));
                acci[0] += q2k_block(si[0], dw[0]);
                acci[1] += q2k_block(si[1], dw[1]);
                acci[2] += q2k_block(si[2], dw[2]);
                acci[3] += q2k_block(si[3], dw[3]);
                acci[4] += q2k_block(si[4], dw[4]);
                acci[5] += q2k_block(si[5], dw[5]);
                acci[6] += q2k_block(si[6], dw[6]);
                acci[7] += q2k_block(si[7], dw[7]);
                si = array<vec2<f32>, 8>();
            }
        } else {
            acc[0] += dot_words_lanes(&q0, c, &xv, xsum, hd[0], tab);
            acc[1] += dot_words_lanes(&q1, c, &xv, xsum, hd[1], tab);
            acc[2] += dot_words_lanes(&q2, c, &xv, xsum, hd[2], tab);
            acc[3] += dot_words_lanes(&q3, c, &xv, xsum, hd[3], tab);
            acc[4] += dot_words_lanes(&q4, c, &xv, xsum, hd[4], tab);
            acc[5] += dot_words_lanes(&q5, c, &xv, xsum, hd[5], tab);
            acc[6] += dot_words_lanes(&q6, c, &xv, xsum, hd[6], tab);
            acc[7] += dot_words_lanes(&q7, c, &xv, xsum, hd[7], tab);
        }
    }
    // XLOAD 1: each lane summed the squares of its own quads; Σx² is the sum over the 8.
    ss += subgroupShuffleXor(ss, 4u);
    ss += subgroupShuffleXor(ss, 2u);
    ss += subgroupShuffleXor(ss, 1u);
    for (var j = 0u; j < 8u; j++) {
        if n0 + j < p.n {
            store(t, n0 + j, finish(dot(acc[j], vec4<f32>(1.0)) + acci[j] + si[j].x, ss));
        }
    }
}

// quant.wgsl's `dot_words`, but IQ4_NL's and IQ4_XS's values looked up by `iq4_lanes`.
fn dot_words_lanes(q: ptr<function, array<u32, 8>>, c: u32, xv: ptr<function, array<vec4<f32>, 8>>, xsum: vec4<f32>, hd: vec4<u32>, tab: u32) -> vec4<f32> {
    if FORMAT != FMT_IQ4_NL && FORMAT != FMT_IQ4_XS {
        return dot_words(q, c, xv, xsum, hd);
    }
    var s = vec4<f32>(0.0);
    for (var i = 0u; i < 4u; i++) {
        s += (*xv)[i] * iq4_lanes((*q)[i], 0u, tab) + (*xv)[i + 4u] * iq4_lanes((*q)[i], 4u, tab);
    }
    if FORMAT == FMT_IQ4_NL {
        return pair_d(hd, c) * s;
    }
    return iq4xs_scale(hd, c % 8u) * s;
}

// Lane l's entries of ggml's kvalues_iq4nl (quant.wgsl's `iq4`), values l % 8 and l % 8 + 8, as
// the top 16 bits of their f32s (bfloat16: the values are integers of at most 7 bits, so exact),
// value l % 8 in bits 16..31 and value l % 8 + 8 in bits 0..15.
fn iq4_table(l: u32) -> u32 {
    let v = array<f32, 16>(-127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0, 1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);
    return (bitcast<u32>(v[l % 8u]) & 0xffff0000u) | (bitcast<u32>(v[l % 8u + 8u]) >> 16u);
}

// quant.wgsl's `iq4` (the values of the nibbles at `shift` of q's 4 bytes), looked up in the
// table the 8 lanes hold (`iq4_table`) by one subgroup shuffle of the nibble's low 3 bits: its
// top bit picks the entry's half by a shift of 0 or 16 (which leaves the chosen half's f32 in the
// top bits), and a mask clears the rest, so the values are exact. lavapipe makes a shuffle one
// permute instruction, where the polynomial is 9 operations a value (and a table in per-lane
// memory a load loop over the lanes). Two shuffles, one for each half and a select, cost AVX2 more:
// IQ4_NL and IQ4_XS took ~1.55x Q4_1's time a byte against ~1.35x this way on an AMD Zen 3
// (docs/BENCHMARKS.md, 2026-12-08). Every lane must take part.
fn iq4_lanes(q: u32, shift: u32, tab: u32) -> vec4<f32> {
    let n = vec4<u32>(q, q >> 8u, q >> 16u, q >> 24u) >> vec4<u32>(shift);
    let m = n & vec4<u32>(7u);
    let e = vec4<u32>(subgroupShuffle(tab, m.x), subgroupShuffle(tab, m.y), subgroupShuffle(tab, m.z), subgroupShuffle(tab, m.w));
    let by = (n << vec4<u32>(1u)) & vec4<u32>(16u);
    return bitcast<vec4<f32>>((e << by) & vec4<u32>(0xffff0000u));
}

// x's chunk as integers (`int_chunk`): d (a power of two) and the integers' sums over the chunk's
// two 16-value halves.
struct IntX {
    d: f32,
    h: vec2<i32>,
}

// The chunk whose quad `own` this lane loaded, as XBITS-bit integers: each value times
// 2^(XBITS + 125 - E), E the biased exponent of the chunk's largest magnitude m (m < 2^(E - 126)),
// lies within ±2^(XBITS - 1) and is rounded to the nearest integer (ties to even) by adding
// 1.5 · 2^23, whose ulp is 1: exact in f32, and no float-to-int conversion, which lavapipe makes
// lane by lane (with clamping). So x is d · an integer with d = 2^(E - 125 - XBITS), as
// `oracle::int_x` computes it. `pairs` gets the 8 quads' integers two a word,
// (x[4i + 2] + x[4i] · 2^16, x[4i + 3] + x[4i + 1] · 2^16) for quad i (wrapping: the low value's
// sign borrows from the high one, which `dot_int` undoes). (llama.cpp's CPU backend scales a
// 256-value block's largest magnitude to 127 instead; a power of two makes the rounding the same
// everywhere, and one scale a 256-value block with the same bits fell outside the decode bounds of
// tests/data/formats/README.md.)
fn int_chunk(own: vec4<f32>, pairs: ptr<function, array<vec2<u32>, 8>>) -> IntX {
    let a = abs(own);
    var m = max(max(a.x, a.y), max(a.z, a.w));
    m = max(m, subgroupShuffleXor(m, 4u));
    m = max(m, subgroupShuffleXor(m, 2u));
    m = max(m, subgroupShuffleXor(m, 1u));
    let e = clamp((bitcast<u32>(m) >> 23u) & 255u, XBITS - 1u, 250u);
    let r = own * bitcast<f32>((XBITS + 252u - e) << 23u) + 12582912.0;
    let qx = bitcast<vec4<u32>>(r) - vec4<u32>(0x4B400000u);
    let mine = vec2<u32>(qx.z + (qx.x << 16u), qx.w + (qx.y << 16u));
    // The sums over lanes 0..3 (quads 0..3) and 4..7, from the integers (the compiler may fold
    // (v + c) - c back to v).
    let qi = bitcast<vec4<i32>>(qx);
    var h = qi.x + qi.y + qi.z + qi.w;
    h += subgroupShuffleXor(h, 1u);
    h += subgroupShuffleXor(h, 2u);
    (*pairs)[0] = subgroupBroadcast(mine, 0u);
    (*pairs)[1] = subgroupBroadcast(mine, 1u);
    (*pairs)[2] = subgroupBroadcast(mine, 2u);
    (*pairs)[3] = subgroupBroadcast(mine, 3u);
    (*pairs)[4] = subgroupBroadcast(mine, 4u);
    (*pairs)[5] = subgroupBroadcast(mine, 5u);
    (*pairs)[6] = subgroupBroadcast(mine, 6u);
    (*pairs)[7] = subgroupBroadcast(mine, 7u);
    return IntX(bitcast<f32>((e + 2u - XBITS) << 23u), vec2<i32>(subgroupBroadcast(h, 0u), subgroupBroadcast(h, 4u)));
}

// A Q2_K row's block from its sums (`dot_int`'s over the block) and its d/dmin word.
fn q2k_block(s: vec2<f32>, dm_word: u32) -> f32 {
    let dm = unpack2x16float(dm_word);
    return dm.x * s.x - dm.y * s.y;
}

// The word at offset `i` in `w` (of a row that is a multiple of 8) and the same word of the 7
// rows after it: one vec4<u64>, row by row.
fn words_rows8(i: u32) -> array<u32, 8> {
    let v = w256[i / 8u];
    return array<u32, 8>(u32(v.x), u32(v.x >> 32u), u32(v.y), u32(v.y >> 32u), u32(v.z), u32(v.z >> 32u), u32(v.w), u32(v.w >> 32u));
}

// `dot_words` with x as integers (`int_chunk`), for Q2_K (XBITS 10) and Q3_K (9). Q2_K's without
// the block's d and dmin, which `q2k_block` applies once a block: Σ scale · Σ x·q and
// Σ minimum · Σ x over the chunk's halves (hs: the scale word of the chunk pair); Q3_K's
// Σ scale · Σ x·(q − 4) times its d (all in its header hd), rounded as `dot_words` rounds it.
// Those sums are integers below 2^20 in magnitude, times x's d: exact in f32. A pair of values
// (q_a, q_b) at bits 0 and 16 of a word, times x's pair (x_b + x_a · 2^16), is
// q_a·x_b + (q_a·x_a + q_b·x_b) · 2^16 (mod 2^32): two products a u32 multiply. Over a 16-value
// half the low field stays below 2^15 in magnitude (8 pairs: Q2_K's 8·3·512 = 12,288, Q3_K's
// 8·7·256 = 14,336) and so does the high one (24,576 and 28,672): adding 2^15 and shifting takes
// the high field out exactly. Those bounds set each format's XBITS.
fn dot_int(q: ptr<function, array<u32, 8>>, c: u32, xp: ptr<function, array<vec2<u32>, 8>>, xi: IntX, hd: vec4<u32>, hs: u32) -> vec2<f32> {
    var a0 = 0u;
    var a1 = 0u;
    let sb = c % 8u;
    if FORMAT == FMT_Q2_K {
        // Values 4i + j at bits 8j + 2i of each half's word: pairs (j, j + 2) at bits 2i and
        // 2i + 16, and 8 bits higher.
        let w0 = (*q)[0];
        let w1 = (*q)[1];
        for (var i = 0u; i < 4u; i++) {
            let p0 = (*xp)[i];
            let p1 = (*xp)[i + 4u];
            a0 += ((w0 >> (2u * i)) & 0x00030003u) * p0.x + ((w0 >> (8u + 2u * i)) & 0x00030003u) * p0.y;
            a1 += ((w1 >> (2u * i)) & 0x00030003u) * p1.x + ((w1 >> (8u + 2u * i)) & 0x00030003u) * p1.y;
        }
    } else if FORMAT == FMT_Q3_K { // the bytes of quant.wgsl's q3_bytes
        let hm = (*q)[0];
        for (var i = 0u; i < 4u; i++) {
            let b0 = q3_bytes((*q)[1], hm, i);
            let b1 = q3_bytes((*q)[2], hm, i + 4u);
            let p0 = (*xp)[i];
            let p1 = (*xp)[i + 4u];
            a0 += (b0 & 0x00070007u) * p0.x + ((b0 >> 8u) & 0x00070007u) * p0.y;
            a1 += (b1 & 0x00070007u) * p1.x + ((b1 >> 8u) & 0x00070007u) * p1.y;
        }
    }
    let s0 = (bitcast<i32>(a0) + 0x8000) >> 16u;
    let s1 = (bitcast<i32>(a1) + 0x8000) >> 16u;
    let h = xi.h;
    if FORMAT == FMT_Q2_K {
        let sc = hs >> (16u * (sb % 2u));
        let sq = s0 * i32(sc & 15u) + s1 * i32((sc >> 8u) & 15u);
        let sm = h.x * i32((sc >> 4u) & 15u) + h.y * i32((sc >> 12u) & 15u);
        return xi.d * vec2<f32>(f32(sq), f32(sm));
    }
    let sq = (s0 - 4 * h.x) * q3k_scale_int(hd, 2u * sb) + (s1 - 4 * h.y) * q3k_scale_int(hd, 2u * sb + 1u);
    return vec2<f32>(bitcast<f32>(hd.w) * (xi.d * f32(sq)), 0.0);
}

// quant.wgsl's `header` for the 8 rows from rb (a multiple of 8): each word the 8 read is one
// vec4<u64>. Separate arrays, not an array of them: naga 30's SPIR-V writer panics on pointers
// into one ("Expression [..] is not cached").
fn header_rows8(rb: u32, c: u32) -> array<vec4<u32>, 8> {
    var a0: array<u32, 4>;
    var a1: array<u32, 4>;
    var a2: array<u32, 4>;
    var a3: array<u32, 4>;
    var a4: array<u32, 4>;
    var a5: array<u32, 4>;
    var a6: array<u32, 4>;
    var a7: array<u32, 4>;
    for (var i = 0u; i < header_words(); i++) {
        let v = words_rows8(header_word(rb, c, i));
        a0[i] = v[0];
        a1[i] = v[1];
        a2[i] = v[2];
        a3[i] = v[3];
        a4[i] = v[4];
        a5[i] = v[5];
        a6[i] = v[6];
        a7[i] = v[7];
    }
    return array<vec4<u32>, 8>(header_of(&a0, c), header_of(&a1, c), header_of(&a2, c), header_of(&a3, c),
                               header_of(&a4, c), header_of(&a5, c), header_of(&a6, c), header_of(&a7, c));
}

// quant.wgsl's `header` for the rows at rb and rb + 1 (rb even): each word both read is one u64.
// Returned, not written through pointers into the caller's `hd`: naga 30's SPIR-V writer panics
// on that ("Expression [..] is not cached").
fn header_pair(rb: u32, c: u32) -> array<vec4<u32>, 2> {
    var a: array<u32, 4>;
    var b: array<u32, 4>;
    for (var i = 0u; i < header_words(); i++) {
        let v = w64[header_word(rb, c, i) / 2u];
        a[i] = u32(v);
        b[i] = u32(v >> 32u);
    }
    return array<vec4<u32>, 2>(header_of(&a, c), header_of(&b, c));
}

// Token t's x quad from lane 2t (`lo`) or 2t + 1 (`hi`) of the 8, as the columns of a matrix.
fn tokens_lo(v: vec4<f32>) -> mat4x4<f32> {
    return mat4x4<f32>(subgroupBroadcast(v, 0u), subgroupBroadcast(v, 2u), subgroupBroadcast(v, 4u), subgroupBroadcast(v, 6u));
}

fn tokens_hi(v: vec4<f32>) -> mat4x4<f32> {
    return mat4x4<f32>(subgroupBroadcast(v, 1u), subgroupBroadcast(v, 3u), subgroupBroadcast(v, 5u), subgroupBroadcast(v, 7u));
}

// Column i of four rows' chunk words (`chunk_word` order; a and b: rows n0 and n0 + 1, c and d:
// n0 + 2 and n0 + 3), 4 values each, as the columns of a matrix: Q4_1 nibbles at `shift`, or Q8_0
// bytes.
fn rows4(qa: ptr<function, array<u32, 8>>, qb: ptr<function, array<u32, 8>>, qc: ptr<function, array<u32, 8>>, qd: ptr<function, array<u32, 8>>, i: u32, shift: u32) -> mat4x4<f32> {
    if FORMAT == FMT_Q8_0 {
        return mat4x4<f32>(i8x4((*qa)[i]), i8x4((*qb)[i]), i8x4((*qc)[i]), i8x4((*qd)[i]));
    }
    return mat4x4<f32>(nib((*qa)[i], shift), nib((*qb)[i], shift), nib((*qc)[i], shift), nib((*qd)[i], shift));
}

// Chunk c's words of the rows at rb and rb + 1 (rb even), one u64 a word: quant.wgsl's
// chunk_words_of for two rows.
fn words_pair(rb: u32, c: u32, qa: ptr<function, array<u32, 8>>, qb: ptr<function, array<u32, 8>>) {
    let bb = blk(rb, chunk_block(c));
    for (var i = 0u; i < chunk_words(); i++) {
        let v = w64[(bb + chunk_word(c, i) * G) / 2u];
        (*qa)[i] = u32(v);
        (*qb)[i] = u32(v >> 32u);
    }
}

// The prefill matmul for Variant::Lanes (block formats): a 4 × 4 tile of y (4 tokens × 4 rows) per
// invocation, as `matmul`, but a 32-value chunk at a time: each row's header is read once a block
// (every header_period() chunks), each word of two neighbouring rows is one u64 load, and the 32
// x quads of the tile's 4 tokens are loaded 4 per lane (lane l of each 8: token l / 2, quads
// (l % 2)·4 .. +3) and broadcast, not 32 per lane. Every lane of a workgroup shares the tile's
// tokens (workgroups are WG × 1).
@compute @workgroup_size(WG)
fn matmul_lanes(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(subgroup_invocation_id) sl: u32) {
    // GLU (matmul.wgsl's): rows j, j + 1 of gate (ra) and of up (rc), 2 columns of act(gate) · up.
    let f = p.n / 2u;
    let n0 = select(gid.x * 4u, gid.x * 2u, GLU > 0u);
    let t0 = gid.y * 4u;
    // No early return (the broadcasts need every lane): tokens past the end repeat the last one,
    // row pairs past the end the last pair (whose second row may be the layout's padding), and
    // their results are not stored.
    let last = (p.n - 1u) & ~1u;
    var ra = row_base(min(n0, last));
    var rc = row_base(min(n0 + 2u, last));
    if GLU > 0u {
        let rows = glu_rows(n0, f);
        ra = row_base(rows.x);
        rc = row_base(rows.z);
    }
    let k4n = p.k / 4u;
    let l = sl % 8u;
    let xb = min(t0 + l / 2u, p.t - 1u) * k4n + (l % 2u) * 4u;
    // acc[c][t]: row c, token t.
    var acc = mat4x4<f32>();
    var hd: array<vec4<u32>, 4>;
    var qa: array<u32, 8>;
    var qb: array<u32, 8>;
    var qc: array<u32, 8>;
    var qd: array<u32, 8>;
    for (var c = 0u; c < p.k / 32u; c++) {
        let x0 = x[xb + c * 8u];
        let x1 = x[xb + c * 8u + 1u];
        let x2 = x[xb + c * 8u + 2u];
        let x3 = x[xb + c * 8u + 3u];
        if has_header() && c % header_period() == 0u {
            let h0 = header_pair(ra, c);
            let h1 = header_pair(rc, c);
            hd[0] = h0[0];
            hd[1] = h0[1];
            hd[2] = h1[0];
            hd[3] = h1[1];
        }
        words_pair(ra, c, &qa, &qb);
        words_pair(rc, c, &qc, &qd);
        if FORMAT != FMT_Q8_0 && FORMAT != FMT_Q4_1 {
            // The other block formats: each row's chunk decoded by quant.wgsl's chunk_values,
            // then the same products.
            var w0: array<vec4<f32>, 8>;
            var w1: array<vec4<f32>, 8>;
            var w2: array<vec4<f32>, 8>;
            var w3: array<vec4<f32>, 8>;
            chunk_values(&qa, c, hd[0], &w0);
            chunk_values(&qb, c, hd[1], &w1);
            chunk_values(&qc, c, hd[2], &w2);
            chunk_values(&qd, c, hd[3], &w3);
            acc += transpose(tokens_lo(x0)) * mat4x4<f32>(w0[0], w1[0], w2[0], w3[0]) + transpose(tokens_lo(x1)) * mat4x4<f32>(w0[1], w1[1], w2[1], w3[1])
                 + transpose(tokens_lo(x2)) * mat4x4<f32>(w0[2], w1[2], w2[2], w3[2]) + transpose(tokens_lo(x3)) * mat4x4<f32>(w0[3], w1[3], w2[3], w3[3])
                 + transpose(tokens_hi(x0)) * mat4x4<f32>(w0[4], w1[4], w2[4], w3[4]) + transpose(tokens_hi(x1)) * mat4x4<f32>(w0[5], w1[5], w2[5], w3[5])
                 + transpose(tokens_hi(x2)) * mat4x4<f32>(w0[6], w1[6], w2[6], w3[6]) + transpose(tokens_hi(x3)) * mat4x4<f32>(w0[7], w1[7], w2[7], w3[7]);
            continue;
        }
        // s[c][t]: Σ x·q over the chunk for row c, token t (transpose: rows of quads · quads).
        var s: mat4x4<f32>;
        if FORMAT == FMT_Q8_0 {
            s = transpose(tokens_lo(x0)) * rows4(&qa, &qb, &qc, &qd, 0u, 0u) + transpose(tokens_lo(x1)) * rows4(&qa, &qb, &qc, &qd, 1u, 0u)
              + transpose(tokens_lo(x2)) * rows4(&qa, &qb, &qc, &qd, 2u, 0u) + transpose(tokens_lo(x3)) * rows4(&qa, &qb, &qc, &qd, 3u, 0u)
              + transpose(tokens_hi(x0)) * rows4(&qa, &qb, &qc, &qd, 4u, 0u) + transpose(tokens_hi(x1)) * rows4(&qa, &qb, &qc, &qd, 5u, 0u)
              + transpose(tokens_hi(x2)) * rows4(&qa, &qb, &qc, &qd, 6u, 0u) + transpose(tokens_hi(x3)) * rows4(&qa, &qb, &qc, &qd, 7u, 0u);
            let h = vec4<f32>(pair_d(hd[0], c), pair_d(hd[1], c), pair_d(hd[2], c), pair_d(hd[3], c));
            acc += mat4x4<f32>(s[0] * h.x, s[1] * h.y, s[2] * h.z, s[3] * h.w);
        } else { // FMT_Q4_1: word 0 is d|m
            s = transpose(tokens_lo(x0)) * rows4(&qa, &qb, &qc, &qd, 1u, 0u) + transpose(tokens_hi(x0)) * rows4(&qa, &qb, &qc, &qd, 1u, 4u)
              + transpose(tokens_lo(x1)) * rows4(&qa, &qb, &qc, &qd, 2u, 0u) + transpose(tokens_hi(x1)) * rows4(&qa, &qb, &qc, &qd, 2u, 4u)
              + transpose(tokens_lo(x2)) * rows4(&qa, &qb, &qc, &qd, 3u, 0u) + transpose(tokens_hi(x2)) * rows4(&qa, &qb, &qc, &qd, 3u, 4u)
              + transpose(tokens_lo(x3)) * rows4(&qa, &qb, &qc, &qd, 4u, 0u) + transpose(tokens_hi(x3)) * rows4(&qa, &qb, &qc, &qd, 4u, 4u);
            let d0 = unpack2x16float(qa[0]);
            let d1 = unpack2x16float(qb[0]);
            let d2 = unpack2x16float(qc[0]);
            let d3 = unpack2x16float(qd[0]);
            // Σ x·(d·q + m) = d·Σ x·q + m·Σ x.
            let ps = (x0 + x1) + (x2 + x3);
            let xs = transpose(tokens_lo(ps) + tokens_hi(ps)) * vec4<f32>(1.0);
            acc += mat4x4<f32>(s[0] * d0.x + xs * d0.y, s[1] * d1.x + xs * d1.y, s[2] * d2.x + xs * d2.y, s[3] * d3.x + xs * d3.y);
        }
    }
    if GLU > 0u {
        for (var ri = 0u; ri < 2u; ri++) {
            for (var ti = 0u; ti < 4u; ti++) {
                if n0 + ri < f && t0 + ti < p.t {
                    store(t0 + ti, n0 + ri, glu(acc[ri][ti], acc[ri + 2u][ti], GLU == 2u));
                }
            }
        }
        return;
    }
    for (var ri = 0u; ri < 4u; ri++) {
        for (var ti = 0u; ti < 4u; ti++) {
            if n0 + ri < p.n && t0 + ti < p.t {
                store(t0 + ti, n0 + ri, acc[ri][ti]);
            }
        }
    }
}
