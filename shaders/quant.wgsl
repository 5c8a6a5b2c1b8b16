// Weight formats: how the kernels that read weights (matmul.wgsl, matmul_lanes.wgsl, embed.wgsl,
// each concatenated after this file) decode a row of W. A including shader declares the uniform
// `p` with fields `k` (values a row) and `w_row` (u32 words a row), and the storage binding `w`.
//
// The GPU layout (src/model/quant.rs, FORMATS and to_gpu_layout): each row is W_ROW words; rows
// are interleaved in groups of G = 32 (word j of row r at (r/G)·W_ROW·G + j·G + r%G), so
// neighbouring invocations (neighbouring rows) load neighbouring words. A row of a block format
// is its GGUF blocks, BW words each; for the formats whose blocks are 4n + 2 bytes (SPLIT = 1:
// Q8_0, Q4_0, Q5_0, IQ4_NL, Q3_K, Q6_K) each block's f16 scale d is moved to a header at the
// start of the row (two a word, block b in half b % 2 of word b / 2) and the rest of the block
// (BW words) follows. The K-quants' blocks are rearranged within (quant.rs's `permute` column):
// each sub-block's values are whole words. Float rows: F32 one value a word; F16 and BF16 two
// (the low half first).
//
// Every block format is read through three functions: `w4` (4 values at 4·k4, for the embedding
// lookup and the tiled matmul on GPUs), `chunk8` (a 32-value chunk's values, each header read
// once: the tiled matmuls on CPU adapters) and `dot_chunk` (the dot product of a 32-value chunk
// with its x values, each header read once, for the matrix-vector kernels). The 256-value formats
// split a block into 8 such chunks (sub-block sb = chunk % 8). Block layouts are ggml's
// (ggml-common.h) but for the K-quants' values (above); word offsets below are within a block's BW
// words.

// The shader ids of src/model/quant.rs's FORMATS table (a test checks them).
const FMT_F32: u32 = 0u;
const FMT_F16: u32 = 1u;
const FMT_Q8_0: u32 = 2u;
const FMT_Q4_1: u32 = 3u;
const FMT_BF16: u32 = 4u;
const FMT_Q4_0: u32 = 5u;
const FMT_Q5_0: u32 = 6u;
const FMT_Q5_1: u32 = 7u;
const FMT_IQ4_NL: u32 = 8u;
const FMT_Q2_K: u32 = 9u;
const FMT_Q3_K: u32 = 10u;
const FMT_Q4_K: u32 = 11u;
const FMT_Q5_K: u32 = 12u;
const FMT_Q6_K: u32 = 13u;
const FMT_IQ4_XS: u32 = 14u;
override FORMAT: u32 = FMT_F32;
// Values a block (1 for the float formats), u32 words a block's body, and whether d is split out.
override BLOCK: u32 = 1u;
override BW: u32 = 1u;
override SPLIT: u32 = 0u;
const G: u32 = 32u;

// Index of word 0 of row `row`; word j is at row_base(row) + j·G.
fn row_base(row: u32) -> u32 {
    return (row / G) * p.w_row * G + row % G;
}

// Index of word 0 of block b's body in the row at rb.
fn blk(rb: u32, b: u32) -> u32 {
    return rb + (SPLIT * ((p.k / BLOCK + 1u) / 2u) + b * BW) * G;
}

// Block b's split-out scale d.
fn blk_d(rb: u32, b: u32) -> f32 {
    return half_of(w[rb + (b / 2u) * G], b);
}

// Word i of the block body at bb.
fn wd(bb: u32, i: u32) -> u32 {
    return w[bb + i * G];
}

// Byte j of the bytes starting at word `base` of the block body at bb.
fn byte_at(bb: u32, base: u32, j: u32) -> u32 {
    return (wd(bb, base + j / 4u) >> (8u * (j % 4u))) & 255u;
}

// Bits `shift`.. of each of the 4 bytes of q, masked: nibbles, 2-bit crumbs, single bits. Converted
// from i32: CPUs (lavapipe) have a signed int→float vector instruction but emulate the unsigned one.
fn field(q: u32, shift: u32, mask: u32) -> vec4<f32> {
    let v = (vec4<u32>(q, q >> 8u, q >> 16u, q >> 24u) >> vec4<u32>(shift)) & vec4<u32>(mask);
    return vec4<f32>(bitcast<vec4<i32>>(v));
}

fn nib(q: u32, shift: u32) -> vec4<f32> {
    return field(q, shift, 15u);
}

// The 4 bytes of w as values (converted from i32, as `field`).
fn bytes4(w: u32) -> vec4<f32> {
    return vec4<f32>(bitcast<vec4<i32>>((vec4<u32>(w) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(255u)));
}

// Quad `quad`'s 4 single bits (the fifth bits of Q5_0, Q5_1 and Q5_K, Q3_K's third) at bit 0 of
// each of a word's 4 bytes: the GPU layout holds value 4·quad + j's bit at bit 8j + quad
// (quant.rs's `bits_by_quad`).
fn quad_bits(q: u32, quad: u32) -> u32 {
    return (q >> quad) & 0x01010101u;
}

// A value that is two bit-fields (a low part and high bits stored apart) is put together as an
// integer, 4 values a word, and converted once (`bytes4`): on lavapipe a conversion and a
// multiply-add a field cost more than the integer operations that combine them. Each takes
// quad `quad` (0..8) of a 32-value chunk: values 4·quad .. 4·quad + 3.
// Q5_0, Q5_1, Q5_K: the nibbles of word n (quads 0..3 low, 4..7 high) and the quad's fifth bits
// from qh.
fn q5_bytes(n: u32, qh: u32, quad: u32) -> u32 {
    return ((n >> (4u * (quad / 4u))) & 0x0f0f0f0fu) | (quad_bits(qh, quad) << 4u);
}

// Q3_K: 2 low bits at 2·(quad % 4) of each byte of ql, and the quad's third bits from hm.
fn q3_bytes(ql: u32, hm: u32, quad: u32) -> u32 {
    return ((ql >> (2u * (quad % 4u))) & 0x03030303u) | (quad_bits(hm, quad) << 2u);
}

// Q6_K: the nibbles of word n (as q5_bytes) and 2 high bits at 2·(quad % 4) of each byte of qh.
fn q6_bytes(n: u32, qh: u32, quad: u32) -> u32 {
    return ((n >> (4u * (quad / 4u))) & 0x0f0f0f0fu) | (((qh >> (2u * (quad % 4u))) & 0x03030303u) << 4u);
}

fn i8x4(q: u32) -> vec4<f32> {
    return vec4<f32>(vec4<i32>(
        bitcast<i32>(q << 24u) >> 24u,
        bitcast<i32>(q << 16u) >> 24u,
        bitcast<i32>(q << 8u) >> 24u,
        bitcast<i32>(q) >> 24u));
}

fn i8_of(b: u32) -> f32 {
    return f32(bitcast<i32>(b << 24u) >> 24u);
}

// ggml's kvalues_iq4nl (IQ4_NL's and IQ4_XS's values of the nibbles 0..15: -127 -104 -83 -65 -49
// -35 -22 -10 1 13 25 38 53 69 89 113) of the nibbles at `shift` (0 or 4) of the 4 bytes of q, as
// a polynomial of degree 4 in the nibble, rounded. The polynomial is the minimax fit: it is off by
// at most 0.433 at each nibble (in f32 too), so the rounding makes it exact; the kernel checks
// compare every nibble against the CPU oracle's table. On lavapipe 5 vector operations a value
// cost less than selecting from a table packed in words (per-lane memory is slower still).
fn iq4(q: u32, shift: u32) -> vec4<f32> {
    let n = nib(q, shift);
    return round((((0.0015860428 * n + 0.03108644) * n - 1.371927) * n + 24.17383) * n - 126.56701);
}

// Q3_K's 6-bit scale s (0..16), minus 32, from the block's `header` (its 12 scale bytes in words
// x..z): the low 4 bits in byte s % 8, the high 2 in byte 8 + s % 4. (`q3k_scale_int`: as an
// integer.)
fn q3k_scale_hd(hd: vec4<u32>, s: u32) -> f32 {
    return f32(q3k_scale_int(hd, s));
}

fn q3k_scale_int(hd: vec4<u32>, s: u32) -> i32 {
    let lo = (select(hd.x, hd.y, s % 8u >= 4u) >> (8u * (s % 4u) + 4u * (s / 8u))) & 15u;
    let hi = (hd.z >> (8u * (s % 4u) + 2u * (s / 4u))) & 3u;
    return i32(lo | (hi << 4u)) - 32;
}

// The same scale of the block at bb (12 bytes at word 24), loading only the two words it reads.
fn q3k_scale(bb: u32, s: u32) -> f32 {
    let lo = wd(bb, 24u + (s % 8u) / 4u);
    return q3k_scale_hd(vec4<u32>(lo, lo, wd(bb, 26u), 0u), s);
}

// Q4_K/Q5_K's 6-bit scale and minimum j (0..8) from the block's `header` (words 1..3: the 12
// scale bytes): ggml's get_scale_min_k4.
fn k4_scale_min(hd: vec4<u32>, j: u32) -> vec2<f32> {
    let e = 8u * (j % 4u);
    if j < 4u {
        return vec2<f32>(f32((hd.y >> e) & 63u), f32((hd.z >> e) & 63u));
    }
    return vec2<f32>(f32(((hd.w >> e) & 15u) | (((hd.y >> (e + 6u)) & 3u) << 4u)), f32(((hd.w >> (e + 4u)) & 15u) | (((hd.z >> (e + 6u)) & 3u) << 4u)));
}

// IQ4_XS's scale of sub-block sb from the block's `header` (d and the high scale bits in word 0,
// the low ones in word 1): d · (6-bit scale − 32).
fn iq4xs_scale(hd: vec4<u32>, sb: u32) -> f32 {
    let lo = (hd.y >> (4u * sb)) & 15u;
    let hi = (hd.x >> (16u + 2u * sb)) & 3u;
    return unpack2x16float(hd.x).x * f32(i32(lo | (hi << 4u)) - 32);
}

// Values 4·k4 .. 4·k4+3 of the row starting at `rb`.
fn w4(rb: u32, k4: u32) -> vec4<f32> {
    if FORMAT == FMT_F32 {
        let b = rb + k4 * 4u * G;
        return vec4<f32>(bitcast<f32>(w[b]), bitcast<f32>(w[b + G]), bitcast<f32>(w[b + 2u * G]), bitcast<f32>(w[b + 3u * G]));
    } else if FORMAT == FMT_F16 {
        let b = rb + k4 * 2u * G;
        return vec4<f32>(unpack2x16float(w[b]), unpack2x16float(w[b + G]));
    } else if FORMAT == FMT_BF16 {
        let b = rb + k4 * 2u * G;
        let u = vec2<u32>(w[b], w[b + G]);
        return vec4<f32>(bitcast<f32>(u.x << 16u), bitcast<f32>(u.x & 0xffff0000u), bitcast<f32>(u.y << 16u), bitcast<f32>(u.y & 0xffff0000u));
    }
    // A 32-value chunk c, its quad i (values 4i .. 4i+3 of the chunk).
    let c = k4 / 8u;
    let i = k4 % 8u;
    if FORMAT == FMT_Q8_0 {
        return blk_d(rb, c) * i8x4(wd(blk(rb, c), i));
    } else if FORMAT == FMT_Q4_1 {
        let bb = blk(rb, c);
        let dm = unpack2x16float(wd(bb, 0u));
        return dm.x * nib(wd(bb, 1u + (i & 3u)), (i >> 2u) * 4u) + dm.y;
    } else if FORMAT == FMT_Q4_0 {
        return blk_d(rb, c) * (nib(wd(blk(rb, c), i & 3u), (i >> 2u) * 4u) - 8.0);
    } else if FORMAT == FMT_Q5_0 {
        let bb = blk(rb, c);
        let q = bytes4(q5_bytes(wd(bb, 1u + (i & 3u)), wd(bb, 0u), i));
        return blk_d(rb, c) * (q - 16.0);
    } else if FORMAT == FMT_Q5_1 {
        let bb = blk(rb, c);
        let dm = unpack2x16float(wd(bb, 0u));
        let q = bytes4(q5_bytes(wd(bb, 2u + (i & 3u)), wd(bb, 1u), i));
        return dm.x * q + dm.y;
    } else if FORMAT == FMT_IQ4_NL {
        return blk_d(rb, c) * iq4(wd(blk(rb, c), i & 3u), (i >> 2u) * 4u);
    }
    // The 256-value formats: block b, sub-block sb, and the 16-value half of it (scale index
    // 2·sb + hh of the formats with 16 scales).
    let b = c / 8u;
    let sb = c % 8u;
    let hh = i / 4u;
    let bb = blk(rb, b);
    if FORMAT == FMT_Q2_K {
        let dm = unpack2x16float(wd(bb, 20u));
        let sc = byte_at(bb, 0u, 2u * sb + hh);
        let q = field(wd(bb, 4u + 2u * sb + i / 4u), 2u * (i % 4u), 3u);
        return dm.x * f32(sc & 15u) * q - dm.y * f32(sc >> 4u);
    } else if FORMAT == FMT_Q3_K {
        let q = bytes4(q3_bytes(wd(bb, 8u + 2u * sb + i / 4u), wd(bb, sb), i)) - 4.0;
        return blk_d(rb, b) * q3k_scale(bb, 2u * sb + hh) * q;
    } else if FORMAT == FMT_Q4_K {
        let hd = header(rb, c);
        let dm = unpack2x16float(hd.x);
        let sm = k4_scale_min(hd, sb);
        return dm.x * sm.x * nib(wd(bb, 4u + 4u * sb + (i & 3u)), (i >> 2u) * 4u) - dm.y * sm.y;
    } else if FORMAT == FMT_Q5_K {
        let hd = header(rb, c);
        let dm = unpack2x16float(hd.x);
        let sm = k4_scale_min(hd, sb);
        let q = bytes4(q5_bytes(wd(bb, 12u + 4u * sb + (i & 3u)), wd(bb, 4u + sb), i));
        return dm.x * sm.x * q - dm.y * sm.y;
    } else if FORMAT == FMT_Q6_K {
        let q = bytes4(q6_bytes(wd(bb, 4u * sb + (i & 3u)), wd(bb, 32u + 2u * sb + i / 4u), i)) - 32.0;
        return blk_d(rb, b) * i8_of(byte_at(bb, 48u, 2u * sb + hh)) * q;
    }
    // FORMAT == FMT_IQ4_XS
    return iq4xs_scale(header(rb, c), sb) * iq4(wd(bb, 2u + 4u * sb + (i & 3u)), (i >> 2u) * 4u);
}

// Dot product of one chunk of the row at `rb` with the chunk's x values `xv` (xsum: their sum):
// a 32-value chunk for the block formats, so each header is read once; 4 values for the float
// formats. `hd`: the chunk's block's `header` (the formats that have one: the matrix-vector
// kernels load it once for the block's 8 chunks). The result's four lanes sum to the dot product.
// A block format's chunk is the words `chunk_word` names, loaded here, and `dot_words`' product
// of them: matmul_lanes.wgsl's `matvec_lanes` loads the same words of 8 rows at once.
fn dot_chunk(rb: u32, c: u32, xv: ptr<function, array<vec4<f32>, 8>>, xsum: vec4<f32>, hd: vec4<u32>) -> vec4<f32> {
    if FORMAT == FMT_F32 || FORMAT == FMT_F16 || FORMAT == FMT_BF16 {
        return (*xv)[0] * w4(rb, c);
    }
    var q: array<u32, 8>;
    chunk_words_of(rb, c, &q);
    return dot_words(&q, c, xv, xsum, hd);
}

// Chunk c's words of the row at rb into q (chunk_word's order).
fn chunk_words_of(rb: u32, c: u32, q: ptr<function, array<u32, 8>>) {
    let bb = blk(rb, chunk_block(c));
    for (var i = 0u; i < chunk_words(); i++) {
        (*q)[i] = wd(bb, chunk_word(c, i));
    }
}

// The block holding chunk c: c for the 32-value formats, c / 8 for the 256-value ones (and a
// divisor naga can check for the float formats, which have no chunks).
fn chunk_block(c: u32) -> u32 {
    return c / max(BLOCK / 32u, 1u);
}

// How many words of its block's body chunk c's product reads (`chunk_word`; at most 8).
fn chunk_words() -> u32 {
    if FORMAT == FMT_Q8_0 {
        return 8u;
    } else if FORMAT == FMT_Q4_1 || FORMAT == FMT_Q5_0 || FORMAT == FMT_Q5_K {
        return 5u;
    } else if FORMAT == FMT_Q5_1 {
        return 6u;
    } else if FORMAT == FMT_Q2_K {
        return 2u;
    } else if FORMAT == FMT_Q3_K {
        return 3u;
    } else if FORMAT == FMT_Q6_K {
        return 7u;
    }
    // Q4_0, IQ4_NL, Q4_K, IQ4_XS
    return 4u;
}

// Word i (< chunk_words()) of what chunk c's product reads: its offset in the block's body
// (quant.rs's permutes put each sub-block's values in whole words).
fn chunk_word(c: u32, i: u32) -> u32 {
    let sb = c % 8u;
    if BLOCK == 32u {
        // Q8_0: the 8 words of bytes; Q4_0, IQ4_NL: 4 of nibbles; Q4_1: d|m, then the nibbles;
        // Q5_0: the fifth bits, then the nibbles; Q5_1: d|m, the fifth bits, the nibbles.
        return i;
    } else if FORMAT == FMT_Q2_K {
        // The sub-block's 2 words of values.
        return 4u + 2u * sb + i;
    } else if FORMAT == FMT_Q3_K {
        // Its word of high bits, then 2 of low bits.
        return select(7u + 2u * sb + i, sb, i == 0u);
    } else if FORMAT == FMT_Q4_K {
        // Its 4 words of nibbles (quads i and i + 4, as Q4_0).
        return 4u + 4u * sb + i;
    } else if FORMAT == FMT_Q5_K {
        // Its word of fifth bits, then its 4 of nibbles.
        return select(11u + 4u * sb + i, 4u + sb, i == 0u);
    } else if FORMAT == FMT_Q6_K {
        // Its 4 words of low bits, 2 of high bits, and the word of its two 8-bit scales.
        return select(select(48u + sb / 2u, 28u + 2u * sb + i, i < 6u), 4u * sb + i, i < 4u);
    }
    // FORMAT == FMT_IQ4_XS: its 4 words of nibbles.
    return 2u + 4u * sb + i;
}

// `dot_chunk`'s product from the chunk's words `q` (chunk_word's order).
fn dot_words(q: ptr<function, array<u32, 8>>, c: u32, xv: ptr<function, array<vec4<f32>, 8>>, xsum: vec4<f32>, hd: vec4<u32>) -> vec4<f32> {
    var s0 = vec4<f32>(0.0);
    var s1 = vec4<f32>(0.0);
    if FORMAT == FMT_Q8_0 {
        for (var i = 0u; i < 8u; i++) {
            s0 += (*xv)[i] * i8x4((*q)[i]);
        }
        return pair_d(hd, c) * s0;
    } else if FORMAT == FMT_Q4_1 {
        let dm = unpack2x16float((*q)[0]);
        for (var i = 0u; i < 4u; i++) {
            s0 += (*xv)[i] * nib((*q)[1u + i], 0u) + (*xv)[i + 4u] * nib((*q)[1u + i], 4u);
        }
        // Σ x·(d·q + m) = d·Σ x·q + m·Σ x, Σ x (`xsum`) being the same for every row
        return dm.x * s0 + dm.y * xsum;
    } else if FORMAT == FMT_Q4_0 {
        for (var i = 0u; i < 4u; i++) {
            s0 += (*xv)[i] * nib((*q)[i], 0u) + (*xv)[i + 4u] * nib((*q)[i], 4u);
        }
        return pair_d(hd, c) * (s0 - 8.0 * xsum);
    } else if FORMAT == FMT_Q5_0 || FORMAT == FMT_Q5_1 {
        // Q5_1's words start with d|m.
        let o = u32(FORMAT == FMT_Q5_1);
        let qh = (*q)[o];
        for (var i = 0u; i < 4u; i++) {
            let n = (*q)[o + 1u + i];
            s0 += (*xv)[i] * bytes4(q5_bytes(n, qh, i)) + (*xv)[i + 4u] * bytes4(q5_bytes(n, qh, i + 4u));
        }
        if FORMAT == FMT_Q5_1 {
            let dm = unpack2x16float((*q)[0]);
            return dm.x * s0 + dm.y * xsum;
        }
        return pair_d(hd, c) * (s0 - 16.0 * xsum);
    } else if FORMAT == FMT_IQ4_NL {
        for (var i = 0u; i < 4u; i++) {
            s0 += (*xv)[i] * iq4((*q)[i], 0u) + (*xv)[i + 4u] * iq4((*q)[i], 4u);
        }
        return pair_d(hd, c) * s0;
    }
    // The 256-value formats: sub-block sb; s0, s1: Σ x·q over its two 16-value halves (each has
    // its own scale in Q2_K, Q3_K and Q6_K).
    let sb = c % 8u;
    if FORMAT == FMT_Q2_K {
        let dm = unpack2x16float(hd.y);
        for (var i = 0u; i < 4u; i++) {
            s0 += (*xv)[i] * field((*q)[0], 2u * i, 3u);
            s1 += (*xv)[i + 4u] * field((*q)[1], 2u * i, 3u);
        }
        let sc = (hd.x >> (16u * (sb % 2u))) & 0xffffu;
        let x0 = (*xv)[0] + (*xv)[1] + (*xv)[2] + (*xv)[3];
        return dm.x * (f32(sc & 15u) * s0 + f32((sc >> 8u) & 15u) * s1) - dm.y * (f32((sc >> 4u) & 15u) * x0 + f32(sc >> 12u) * (xsum - x0));
    } else if FORMAT == FMT_Q3_K {
        let hm = (*q)[0];
        for (var i = 0u; i < 4u; i++) {
            s0 += (*xv)[i] * bytes4(q3_bytes((*q)[1], hm, i));
            s1 += (*xv)[i + 4u] * bytes4(q3_bytes((*q)[2], hm, i + 4u));
        }
        // Σ x·(q − 4): the −4 over each half.
        let x0 = (*xv)[0] + (*xv)[1] + (*xv)[2] + (*xv)[3];
        return bitcast<f32>(hd.w) * (q3k_scale_hd(hd, 2u * sb) * (s0 - 4.0 * x0) + q3k_scale_hd(hd, 2u * sb + 1u) * (s1 - 4.0 * (xsum - x0)));
    } else if FORMAT == FMT_Q4_K || FORMAT == FMT_Q5_K {
        let dm = unpack2x16float(hd.x);
        let sm = k4_scale_min(hd, sb);
        // Q5_K's words start with the fifth bits.
        let o = u32(FORMAT == FMT_Q5_K);
        for (var i = 0u; i < 4u; i++) {
            let n = (*q)[o + i];
            var lo: vec4<f32>;
            var hi: vec4<f32>;
            if FORMAT == FMT_Q5_K {
                lo = bytes4(q5_bytes(n, (*q)[0], i));
                hi = bytes4(q5_bytes(n, (*q)[0], i + 4u));
            } else {
                lo = nib(n, 0u);
                hi = nib(n, 4u);
            }
            s0 += (*xv)[i] * lo + (*xv)[i + 4u] * hi;
        }
        return dm.x * sm.x * s0 - dm.y * sm.y * xsum;
    } else if FORMAT == FMT_Q6_K {
        for (var i = 0u; i < 4u; i++) {
            let n = (*q)[i];
            s0 += (*xv)[i] * bytes4(q6_bytes(n, (*q)[4], i));
            s1 += (*xv)[i + 4u] * bytes4(q6_bytes(n, (*q)[5], i + 4u));
        }
        let sc = (*q)[6] >> (16u * (sb % 2u));
        let x0 = (*xv)[0] + (*xv)[1] + (*xv)[2] + (*xv)[3];
        return bitcast<f32>(hd.x) * (i8_of(sc & 255u) * (s0 - 32.0 * x0) + i8_of((sc >> 8u) & 255u) * (s1 - 32.0 * (xsum - x0)));
    }
    // FORMAT == FMT_IQ4_XS
    for (var i = 0u; i < 4u; i++) {
        s0 += (*xv)[i] * iq4((*q)[i], 0u) + (*xv)[i + 4u] * iq4((*q)[i], 4u);
    }
    return iq4xs_scale(hd, sb) * s0;
}

// Whether the format's blocks have a `header` that `dot_chunk` takes rather than loads: Q4_K and
// Q5_K (d, dmin, 12 scale bytes), IQ4_XS (d, the scales), Q3_K (12 scale bytes, d as f32), Q6_K
// (d as f32), Q2_K (the scale word of two sub-blocks, d and dmin: a header every 2 chunks). Not
// Q6_K's 16 scale bytes, nor Q2_K's as a block's header: 4 more live words a row, measured slower
// on lavapipe (docs/BENCHMARKS.md).
fn has_header() -> bool {
    return FORMAT == FMT_Q4_K || FORMAT == FMT_Q5_K || FORMAT == FMT_IQ4_XS || FORMAT == FMT_Q3_K || FORMAT == FMT_Q6_K || FORMAT == FMT_Q2_K || d_pair();
}

// The 32-value formats whose d is split out (Q8_0, Q4_0, Q5_0, IQ4_NL): their header is the word
// holding the d of two blocks.
fn d_pair() -> bool {
    return SPLIT == 1u && BLOCK == 32u;
}

// Chunks a `header` serves: a block's 8, but 2 for Q2_K (its header is the scale word of 2
// sub-blocks, and d and dmin) and the d_pair formats.
fn header_period() -> u32 {
    return select(8u, 2u, FORMAT == FMT_Q2_K || d_pair());
}

// The d of block c from its d_pair header.
fn pair_d(hd: vec4<u32>, c: u32) -> f32 {
    let h = unpack2x16float(hd.x);
    return select(h.x, h.y, (c & 1u) == 1u);
}

// The header for chunk c of the row at rb (zeros for the formats without one): words 0..3 of its block's body,
// but IQ4_XS's words 0..1, Q3_K's scale bytes (words 24..26) and d (as f32 bits), Q6_K's d (as
// f32 bits), Q2_K's scale word for chunks c and c ^ 1 and its d/dmin word, and the d_pair formats'
// d word for blocks c and c ^ 1. The words `header_word` names, loaded here, and `header_of` them:
// matmul_lanes.wgsl loads the same words of several rows at once.
fn header(rb: u32, c: u32) -> vec4<u32> {
    var h: array<u32, 4>;
    for (var i = 0u; i < header_words(); i++) {
        h[i] = w[header_word(rb, c, i)];
    }
    return header_of(&h, c);
}

// How many words a header is made of (at most 4; none for the formats without one).
fn header_words() -> u32 {
    if !has_header() {
        return 0u;
    } else if d_pair() || FORMAT == FMT_Q6_K {
        return 1u;
    } else if FORMAT == FMT_IQ4_XS || FORMAT == FMT_Q2_K {
        return 2u;
    }
    return 4u; // Q3_K, Q4_K, Q5_K
}

// Where in `w` word i (< header_words()) of chunk c's header for the row at rb lies: an offset
// from rb by a multiple of G (so the same word of the row after rb is the next one).
fn header_word(rb: u32, c: u32, i: u32) -> u32 {
    if d_pair() {
        return rb + (c / 2u) * G;
    }
    let b = c / 8u;
    let bb = blk(rb, b);
    if FORMAT == FMT_Q6_K || (FORMAT == FMT_Q3_K && i == 3u) {
        // The word of the split-out d (blk_d's).
        return rb + (b / 2u) * G;
    } else if FORMAT == FMT_Q3_K {
        return bb + (24u + i) * G;
    } else if FORMAT == FMT_Q2_K {
        return bb + select(20u, (c % 8u) / 2u, i == 0u) * G;
    }
    return bb + i * G; // IQ4_XS, Q4_K, Q5_K
}

// The header from its words `h` (header_word's order): Q3_K's and Q6_K's d picked from its word
// (as blk_d) and held as f32 bits; the others as they are.
fn header_of(h: ptr<function, array<u32, 4>>, c: u32) -> vec4<u32> {
    let b = c / 8u;
    if FORMAT == FMT_Q3_K {
        return vec4<u32>((*h)[0], (*h)[1], (*h)[2], bitcast<u32>(half_of((*h)[3], b)));
    } else if FORMAT == FMT_Q6_K {
        return vec4<u32>(bitcast<u32>(half_of((*h)[0], b)), 0u, 0u, 0u);
    }
    return vec4<u32>((*h)[0], (*h)[1], (*h)[2], (*h)[3]);
}

// Block b's f16 from the word holding blocks b and b ^ 1's.
fn half_of(word: u32, b: u32) -> f32 {
    let h = unpack2x16float(word);
    return select(h.x, h.y, (b & 1u) == 1u);
}

// The 32 values of chunk c of the row at rb (a 32-value block, or sub-block c % 8 of a 256-value
// block) as 8 quads, each header read once: the tiled matmuls (a quad at a time through `w4`
// re-reads the header for each of them). Block formats only. The chunk's words and header, loaded
// here, and `chunk_values`' decoding of them: matmul_lanes.wgsl loads the words of two rows at once.
fn chunk8(rb: u32, c: u32, o: ptr<function, array<vec4<f32>, 8>>) {
    var q: array<u32, 8>;
    chunk_words_of(rb, c, &q);
    chunk_values(&q, c, header(rb, c), o);
}

// Chunk c's 32 values (8 quads) from its words `q` (chunk_word's order) and its block's `header`
// `hd`: `dot_words`' decoding without the x values.
fn chunk_values(q: ptr<function, array<u32, 8>>, c: u32, hd: vec4<u32>, o: ptr<function, array<vec4<f32>, 8>>) {
    if FORMAT == FMT_Q8_0 {
        let d = pair_d(hd, c);
        for (var i = 0u; i < 8u; i++) {
            (*o)[i] = d * i8x4((*q)[i]);
        }
        return;
    } else if FORMAT == FMT_Q4_1 {
        let dm = unpack2x16float((*q)[0]);
        for (var i = 0u; i < 4u; i++) {
            let n = (*q)[1u + i];
            (*o)[i] = dm.x * nib(n, 0u) + dm.y;
            (*o)[i + 4u] = dm.x * nib(n, 4u) + dm.y;
        }
        return;
    } else if FORMAT == FMT_Q4_0 {
        let d = pair_d(hd, c);
        for (var i = 0u; i < 4u; i++) {
            let n = (*q)[i];
            (*o)[i] = d * (nib(n, 0u) - 8.0);
            (*o)[i + 4u] = d * (nib(n, 4u) - 8.0);
        }
        return;
    } else if FORMAT == FMT_Q5_0 || FORMAT == FMT_Q5_1 {
        // Q5_0: d from the header, x = d·(q − 16); Q5_1: d and m in word 0, x = d·q + m (as w4).
        var dm = vec2<f32>(0.0);
        var sub = 16.0;
        var off = 0u;
        if FORMAT == FMT_Q5_1 {
            dm = unpack2x16float((*q)[0]);
            sub = 0.0;
            off = 1u;
        } else {
            dm.x = pair_d(hd, c);
        }
        let qh = (*q)[off];
        for (var i = 0u; i < 4u; i++) {
            let n = (*q)[off + 1u + i];
            (*o)[i] = dm.x * (bytes4(q5_bytes(n, qh, i)) - sub) + dm.y;
            (*o)[i + 4u] = dm.x * (bytes4(q5_bytes(n, qh, i + 4u)) - sub) + dm.y;
        }
        return;
    } else if FORMAT == FMT_IQ4_NL {
        let d = pair_d(hd, c);
        for (var i = 0u; i < 4u; i++) {
            let n = (*q)[i];
            (*o)[i] = d * iq4(n, 0u);
            (*o)[i + 4u] = d * iq4(n, 4u);
        }
        return;
    }
    // The 256-value formats: sub-block sb.
    let sb = c % 8u;
    if FORMAT == FMT_Q2_K {
        let dm = unpack2x16float(hd.y);
        let sc = (hd.x >> (16u * (sb % 2u))) & 0xffffu;
        let d0 = dm.x * f32(sc & 15u);
        let m0 = dm.y * f32((sc >> 4u) & 15u);
        let d1 = dm.x * f32((sc >> 8u) & 15u);
        let m1 = dm.y * f32(sc >> 12u);
        for (var i = 0u; i < 4u; i++) {
            (*o)[i] = d0 * field((*q)[0], 2u * i, 3u) - m0;
            (*o)[i + 4u] = d1 * field((*q)[1], 2u * i, 3u) - m1;
        }
    } else if FORMAT == FMT_Q3_K {
        let d = bitcast<f32>(hd.w);
        let d0 = d * q3k_scale_hd(hd, 2u * sb);
        let d1 = d * q3k_scale_hd(hd, 2u * sb + 1u);
        let hm = (*q)[0];
        for (var i = 0u; i < 4u; i++) {
            (*o)[i] = d0 * (bytes4(q3_bytes((*q)[1], hm, i)) - 4.0);
            (*o)[i + 4u] = d1 * (bytes4(q3_bytes((*q)[2], hm, i + 4u)) - 4.0);
        }
    } else if FORMAT == FMT_Q4_K || FORMAT == FMT_Q5_K {
        let dm = unpack2x16float(hd.x);
        let sm = k4_scale_min(hd, sb);
        let d = dm.x * sm.x;
        let m = dm.y * sm.y;
        // Q5_K's words start with the fifth bits.
        let o5 = u32(FORMAT == FMT_Q5_K);
        for (var i = 0u; i < 4u; i++) {
            let n = (*q)[o5 + i];
            var lo: vec4<f32>;
            var hi: vec4<f32>;
            if FORMAT == FMT_Q5_K {
                lo = bytes4(q5_bytes(n, (*q)[0], i));
                hi = bytes4(q5_bytes(n, (*q)[0], i + 4u));
            } else {
                lo = nib(n, 0u);
                hi = nib(n, 4u);
            }
            (*o)[i] = d * lo - m;
            (*o)[i + 4u] = d * hi - m;
        }
    } else if FORMAT == FMT_Q6_K {
        let d = bitcast<f32>(hd.x);
        let sc = (*q)[6] >> (16u * (sb % 2u));
        let d0 = d * i8_of(sc & 255u);
        let d1 = d * i8_of((sc >> 8u) & 255u);
        for (var i = 0u; i < 4u; i++) {
            let n = (*q)[i];
            (*o)[i] = d0 * (bytes4(q6_bytes(n, (*q)[4], i)) - 32.0);
            (*o)[i + 4u] = d1 * (bytes4(q6_bytes(n, (*q)[5], i + 4u)) - 32.0);
        }
    } else {
        // FORMAT == FMT_IQ4_XS
        let d = iq4xs_scale(hd, sb);
        for (var i = 0u; i < 4u; i++) {
            let n = (*q)[i];
            (*o)[i] = d * iq4(n, 0u);
            (*o)[i + 4u] = d * iq4(n, 4u);
        }
    }
}
