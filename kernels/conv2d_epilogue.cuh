/* conv2d_epilogue.cuh -- the fused epilogue of the tensor-core forward kernels (conv2d_pipelined.cu, mma.sync;
 * conv2d_wgmma.cu and conv2d_warpspec.cu, wgmma), one warp's m16 x (NT8*8) accumulator tile at a time. Both instructions
 * leave a warp's accumulators in the same layout: for n8 tile j, acc[j][2h + e] is row mrow + g + 8h, column
 * nbase + 8j + 2*t4 + e (g = lane/4, t4 = lane%4). Needs ACT (common.cuh) and conv_args (params.cuh).
 *   tile_epilogue_smem     y = relu?(acc * scale + shift + residual), rounded once to act_t, 16-byte stores of
 *                          8 channels per lane, the accumulators turned into that layout through 1 KB of shared
 *                          memory per warp (the kernels lend it from a stage no copy or multiply uses by then).
 *                          It replaced a transpose by lane shuffles whose lane-dependent register selects cost
 *                          ~150 instructions per 8 outputs (ncu, docs/perf-log.md step 21)
 *   tile_epilogue_rows     the same for conv2d_warpspec.cu (F16/BF16): scale/shift, residual and ReLU applied in the
 *                          accumulator layout (the residual brought into it through the scratch), each pair
 *                          rounded into one word of act_t, and the warp's MB x m16 x (NT8*8) tile passed through
 *                          the 1 KB as act_t, 8 rows x 64 channels at a time: about half the instructions per
 *                          output of tile_epilogue_smem (ncu: the 1x1 convs spent two thirds of their consumer
 *                          samples there, perf-log step 30)
 *   tile_epilogue_cols     conv2d_warpspec.cu's SWAP rows, whose accumulators hold the transposed tile (rows output
 *                          channels, columns pixels): scale/shift and ReLU per channel, each value rounded into
 *                          1 KB of shared memory as 16 pixels x 16 channels and read back as 8 channels of one
 *                          pixel per lane, 16-byte stores (no residual)
 *   tile_epilogue_cols_tma the same for conv2d_warpspec.cu's OST rows: the warp's 16 channels x NT8*8 pixels rounded into a
 *                          box of shared memory of its own (stmatrix, transposed: 32 bytes per pixel), stored by TMA
 *                          in pieces while the next tile is multiplied (ost_store)
 *   tile_partials          split-K: the raw fp32 sums into a.ws (slice blockIdx.z); conv2d_pipelined_splitk_epilogue
 *                          finishes them
 *   tile_prefetch_residual the residual this tile will add, into L2 (a hint, issued when the CTA starts)
 *   tile_stage_residual    the residual tile_epilogue_rows will add, copied (cp.async) into shared memory in the
 *                          layout of its scratch, one KB per pass (conv2d_warpspec.cu's RSM rows)
 *   out_ok, out_at         where row m of the GEMM goes: row m of y, or (OUT_PHASE) a pixel of one phase of a
 *                          strided dgrad's dx; every store and residual load but the OST rows' goes through them (a
 *                          phase program is never an OST row's: its TMA map is y's rows)
 */
#ifndef CNN_KERNELS_CONV2D_EPILOGUE_CUH
#define CNN_KERNELS_CONV2D_EPILOGUE_CUH

/* OUT_PHASE=1: the program writes one phase of a strided dgrad into dx in place (src/cuda/conv2d_dgrad.c; the
 * phase families of conv2d_programs.c compile every forward row so). Only those programs carry the mapping: tested at
 * run time in the shared epilogue it lengthened every forward kernel (perf-log step 74). */
#ifndef OUT_PHASE
#define OUT_PHASE 0
#endif
/* What tile_epilogue_rows does with the residual operand: none, add it, or (EPI_GATE: conv2d_warpspec.cu's FT_GATE
 * programs, dgrads reading the forward's filter as it is) gate by it: the operand is the output of the ReLU before
 * the forward conv, and out = residual > 0 ? acc : 0, that ReLU's backward taken into the dgrad
 * (src/cuda/conv2d_dgrad.c). Programs of their own: a run-time choice between adding and gating, in one body or
 * between two instantiations, made the 128x256 cooperative row spill (perf-log step 98). */
enum { EPI_NONE = 0, EPI_ADD = 1, EPI_GATE = 2 };
/* where output row m goes. out_ok: whether the output holds it (m < gm; with OUT_PHASE not the block's rows and
 * columns outside the phase); out_at: the element offset of its first channel in y (and in the residual): row m of
 * y, or with OUT_PHASE the pixel of dx that row (n, i, j) of the phase's block stands for (params.cuh's ph_* fields).
 * Without OUT_PHASE they are the expressions the stores had before: the forward programs compile as they did. */
#if OUT_PHASE
struct out_pixel {
    int img, u, v; /* row m's image, and its row and column in the phase */
};
__device__ __forceinline__ out_pixel out_pixel_of(const conv_args &a, int m) {
    const int t = div_by(m, a.q, a.ph_q_mul, a.ph_q_shr), j = m - t * a.q;
    const int img = div_by(t, a.p, a.ph_p_mul, a.ph_p_shr), i = t - img * a.p;
    return out_pixel{img, i - a.ph_off_h, j - a.ph_off_w};
}
__device__ __forceinline__ bool out_ok(const conv_args &a, int m) {
    if (m >= a.gm) return false;
    const out_pixel o = out_pixel_of(a, m);
    return o.u >= 0 && o.v >= 0 && o.u < a.ph_rows && o.v < a.ph_cols;
}
__device__ __forceinline__ long long out_at(const conv_args &a, int m) { /* dx's pixels number < 2^31 (host) */
    const out_pixel o = out_pixel_of(a, m);
    return (long long)((o.img * a.ph_h + o.u * a.ph_sh + a.ph_a) * a.ph_w + o.v * a.ph_sw + a.ph_b) * a.gn;
}
#else
__device__ __forceinline__ bool out_ok(const conv_args &a, int m) { return m < a.gm; }
__device__ __forceinline__ long long out_at(const conv_args &a, int m) { return (long long)m * a.gn; }
#endif

template <int NT8>
__device__ __forceinline__ void tile_prefetch_residual(const conv_args &a, int mrow, int nbase, int lane) {
    const act_t *res = (const act_t *)a.residual;
    if (!res || a.splits != 1 || (lane & 3) != 0) return;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int m = mrow + (lane >> 2) + h * 8;
#pragma unroll
        for (int jb = 0; jb < NT8; jb += 4) {
            const int n = nbase + jb * 8;
            if (out_ok(a, m) && n < a.gn) prefetch_l2(res + out_at(a, m) + n);
        }
    }
}

template <int NT8>
__device__ __forceinline__ void tile_partials(const conv_args &a, const float (*acc)[4], int mrow, int nbase, int lane) {
    float *ws = a.ws + (long long)blockIdx.z * a.gm * a.gn;
    const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
    for (int j = 0; j < NT8; j++) {
        const int n = nbase + j * 8 + 2 * t4;
        if (n >= a.gn) continue;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int m = mrow + g + h * 8;
            if (m < a.gm) *(float2 *)(ws + (long long)m * a.gn + n) = make_float2(acc[j][2 * h], acc[j][2 * h + 1]);
        }
    }
}

/* The scratch of tile_epilogue_smem: 8 rows x 32 fp32 (8 rows of the m16 tile, 4 n8 tiles), 4-word groups
 * swizzled by row so that both the lanes' 8-byte writes (accumulator layout: row g, columns 8j + 2*t4) and their
 * 16-byte reads (row lane/4, columns 8*(lane%4) .. +7) hit 32 distinct banks per phase. */
__device__ __forceinline__ int epi_word(int r, int c) {
    return r * 32 + ((((c >> 2) ^ (((r & 3) << 1) | (r & 1))) << 2) | (c & 3));
}

/* One warp's m16 x (NT8*8) tile, 32 columns (a chunk) at a time: the 8 rows of each half (h) are written to the
 * scratch in accumulator layout and read back as 8 consecutive channels per lane (row lane/4, channel group
 * lane%4), then scale/shift (two 16-byte vectors each per chunk, shared by both halves), residual, ReLU, one
 * rounding, a 16-byte store: 64 contiguous bytes per row per warp instruction. The next chunk's residual vectors
 * are loaded before this chunk's stores (F16/BF16), so two chunks' loads overlap. scr: 1 KB (256 floats, 16-byte aligned)
 * that only this warp touches meanwhile; each lane reads back exactly the residual vectors it writes (y may
 * alias the residual). */
template <int NT8>
__device__ __forceinline__ void tile_epilogue_smem(const conv_args &a, const float (*acc)[4], int mrow, int nbase, int lane,
                                                   float *scr) {
    static_assert(NT8 % 4 == 0, "chunks of four n8 tiles");
    constexpr int NC = NT8 / 4;
    act_t *y = (act_t *)a.out;
    const act_t *res = (const act_t *)a.residual;
    const int g = lane >> 2, t4 = lane & 3; /* the write role (accumulator layout) and the read role (row, group) */
    /* the next chunk's residual loads ahead of this chunk's stores; not with F32 activations (TF32), whose
     * residual vectors are twice the registers (the 128x256 mma.sync tile would spill) */
    constexpr bool AHEAD = ACT != ACT_F32;
    act8 rv[AHEAD ? 2 : 1][2]; /* [chunk parity][half] */
    auto load_res = [&](int c, act8 *dst) {
        const int n = nbase + c * 32 + t4 * 8;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int m = mrow + h * 8 + g;
            dst[h] = act8_zero();
            if (res && out_ok(a, m) && n < a.gn) dst[h] = act8_load(res + out_at(a, m) + n);
        }
    };
    if (AHEAD) load_res(0, rv[0]);
#pragma unroll
    for (int c = 0; c < NC; c++) {
        if (!AHEAD) load_res(c, rv[0]);
        else if (c + 1 < NC) load_res(c + 1, rv[(c + 1) & (AHEAD ? 1 : 0)]);
        const int n = nbase + c * 32 + t4 * 8;
        const bool n_ok = n < a.gn; /* K % 8 == 0: all 8 channels or none */
        float sc[8], sh[8];
#pragma unroll
        for (int k = 0; k < 8; k++) sc[k] = 1.0f, sh[k] = 0.0f;
        if (a.scale && n_ok) {
            const float4 s0 = *(const float4 *)(a.scale + n), s1 = *(const float4 *)(a.scale + n + 4);
            sc[0] = s0.x, sc[1] = s0.y, sc[2] = s0.z, sc[3] = s0.w, sc[4] = s1.x, sc[5] = s1.y, sc[6] = s1.z, sc[7] = s1.w;
        }
        if (a.shift && n_ok) {
            const float4 s0 = *(const float4 *)(a.shift + n), s1 = *(const float4 *)(a.shift + n + 4);
            sh[0] = s0.x, sh[1] = s0.y, sh[2] = s0.z, sh[3] = s0.w, sh[4] = s1.x, sh[5] = s1.y, sh[6] = s1.z, sh[7] = s1.w;
        }
#pragma unroll
        for (int h = 0; h < 2; h++) {
            __syncwarp(); /* the previous half's reads are done */
#pragma unroll
            for (int jj = 0; jj < 4; jj++)
                *(float2 *)(scr + epi_word(g, jj * 8 + t4 * 2)) = make_float2(acc[c * 4 + jj][2 * h], acc[c * 4 + jj][2 * h + 1]);
            __syncwarp();
            const float4 lo = *(const float4 *)(scr + epi_word(g, t4 * 8)), hi = *(const float4 *)(scr + epi_word(g, t4 * 8 + 4));
            float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
            const int m = mrow + h * 8 + g;
            if (!out_ok(a, m) || !n_ok) continue;
#pragma unroll
            for (int k = 0; k < 8; k++) v[k] = v[k] * sc[k] + sh[k];
            if (res) {
                float r8[8];
                act8_unpack(rv[c & (AHEAD ? 1 : 0)][h], r8);
#pragma unroll
                for (int k = 0; k < 8; k++) v[k] += r8[k];
            }
            if (a.relu) {
#pragma unroll
                for (int k = 0; k < 8; k++) v[k] = v[k] > 0.0f ? v[k] : 0.0f;
            }
            act8_store(y + out_at(a, m) + n, v);
        }
    }
}

#if ACT != ACT_F32
/* The scratch of tile_epilogue_rows: 8 rows x 64 channels of act_t (128 bytes a row), 16-byte groups swizzled
 * by row (group q of row r at q ^ f(r), f(r) = 4*(r%2) + r/2) so that both the lanes' 4-byte writes (row g, the
 * word 2*t4 of n8 tile j: one group of each row per instruction) and their 16-byte reads (row lane/4, groups
 * lane%4 and lane%4 + 4: two rows per 8-lane phase, f of the two differing in bit 2) hit 32 distinct banks. */
__device__ __forceinline__ int epi_row_word(int r, int q, int e) {
    return r * 32 + ((q ^ (((r & 1) << 2) | (r >> 1))) << 2) + e;
}
/* pass p of a warp's tile_epilogue_rows (p = (64-column chunk, m64 block, half) in that order): the row of lane
 * group g, and the first column of the lane's k-th 16-byte group (t4 = lane % 4; groups t4 and t4 + 4) */
template <int MB> __device__ __forceinline__ int epi_pass_row(int mrow, int p, int g) {
    return mrow + (p / 2 % MB) * 64 + (p % 2) * 8 + g;
}
template <int MB> __device__ __forceinline__ int epi_pass_col(int nbase, int p, int t4, int k) {
    return nbase + p / (2 * MB) * 64 + (t4 + 4 * k) * 8;
}

/* The residual of a warp's tile_epilogue_rows, every pass, copied into rst (one KB per pass, 16-byte aligned, the
 * warp's own) where the scratch's layout has it: each lane copies the two 8-channel vectors it will store per
 * pass (zeros past gm or gn) and closes them into one cp.async group, which it waits for (then __syncwarp: the
 * epilogue reads other lanes' words) before the epilogue. */
template <int MB, int NT8>
__device__ __forceinline__ void tile_stage_residual(const conv_args &a, int mrow, int nbase, int lane, unsigned *rst) {
    constexpr int NP = NT8 / 8 * MB * 2;
    const act_t *res = (const act_t *)a.residual;
    const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
    for (int p = 0; p < NP; p++) {
        const int m = epi_pass_row<MB>(mrow, p, g);
#pragma unroll
        for (int k = 0; k < 2; k++) {
            const int n = epi_pass_col<MB>(nbase, p, t4, k);
            const bool ok = out_ok(a, m) && n < a.gn;
            cp_async16(rst + p * 256 + epi_row_word(g, t4 + 4 * k, 0), ok ? res + out_at(a, m) + n : res, ok);
        }
    }
    cp_async_commit();
}

#ifndef STATS
#define STATS 0
#endif
#if STATS
/* STATS=1 (conv2d_warpspec.cu's stats programs, a conv whose output a training BatchNorm reads): tile_epilogue_rows
 * also sums each channel's stored values and their squares over the consumer's rows of the tile, for
 * conv_args.stats (params.cuh). Its gating dgrads (RES = EPI_GATE) sum the values alone (the squares stay zero and
 * are not stored), into a.stats where it is set. Per 64-column chunk a lane holds 32 sums, v[s * 16 + k * 8 + e] for channel
 * (lane % 4 + 4k) * 8 + e of the chunk (s = 0: y, 1: y^2) over its rows; stats_flush adds them over the 8 lanes
 * of the same lane % 4 by three halving exchanges (each lane keeps half of what it has and receives its
 * partner's copy of that half: 28 shuffles, ending with lane l holding sums (l / 4) * 4 .. + 3), then over the
 * consumer's 4 warps in warp order through `buf`, each warp writing 32 of the chunk's 128 sums. A chunk's
 * exchange goes through one of two buffers, alternately, behind one barrier of the consumer's 128 threads (a named
 * barrier; in the emulator an mbarrier phase that each warp's lane 0 arrives at): a warp writes a buffer again two
 * chunks later, after the next chunk's barrier, which every warp reaches only after its reads of this one. The
 * order of every addition is fixed: the sums are deterministic. */
struct epi_stats {
    float *buf;              /* this consumer's exchange area: [2 buffers][4 warps][128 floats] */
    unsigned long long *bar; /* the emulator's: an mbarrier, 4 arrivals a phase */
    unsigned count;          /* chunks this consumer has flushed: the buffer (and the emulator's phase) */
    int warp;                /* the warp within the consumer */
    int chunk;               /* the tile's row chunk of this consumer: its first row / CBM */
    int bar_id;              /* the consumer's named barrier (1 + consumer; 0 is __syncthreads') */
};
template <int MASK>
__device__ __forceinline__ void stats_halve(float (&v)[32], int lane) {
    constexpr int HALF = MASK; /* 32 -> 16 sums at lane bit 16, 16 -> 8 at bit 8, 8 -> 4 at bit 4 */
    const bool hi = (lane & MASK) != 0;
#pragma unroll
    for (int i = 0; i < HALF; i++) {
        const float send = hi ? v[i] : v[i + HALF], keep = hi ? v[i + HALF] : v[i];
        v[i] = keep + __shfl_xor_sync(0xffffffffu, send, MASK);
    }
}
template <bool SQUARES>
__device__ __forceinline__ void stats_flush(const conv_args &a, float (&v)[32], int cbase, int lane, epi_stats &st) {
    stats_halve<16>(v, lane);
    stats_halve<8>(v, lane);
    stats_halve<4>(v, lane);
    const unsigned ph = st.count++;
    float *b0 = st.buf + (ph & 1u) * 4 * 128;
    *(float4 *)(b0 + st.warp * 128 + lane * 4) = make_float4(v[0], v[1], v[2], v[3]);
#if defined(__CUDA_ARCH__)
    asm volatile("bar.sync %0, 128;\n" ::"r"(st.bar_id) : "memory");
#else
    __syncwarp();
    if (lane == 0) mbar_arrive(st.bar);
    mbar_wait(st.bar, ph & 1u);
#endif
    const int f = st.warp * 32 + lane, src = f >> 2, g = src >> 2;
    const float t = ((b0[f] + b0[128 + f]) + b0[256 + f]) + b0[384 + f];
    const int col = cbase + ((src & 3) + 4 * ((g >> 1) & 1)) * 8 + (g & 1) * 4 + (f & 3);
    if (col < a.gn && (SQUARES || g < 4) && a.stats)
        a.stats[((long long)(g >> 2) * a.stats_chunks + st.chunk) * a.gn + col] = t;
}
#else
struct epi_stats;
#endif

/* A warp's MB m16 blocks (rows mrow + 64 b + ...) x NT8*8 columns from nbase: y = relu?(acc * scale + shift +
 * residual) in the accumulator layout, rounded once, in passes of 8 rows x 64 channels through the scratch. Per
 * 64-column chunk the lane's scale/shift pairs (two columns per n8 tile) are loaded once for every block and
 * half. Per pass, with a residual: each lane loads the residual's 8-channel vectors it will store (row lane/4,
 * groups lane%4 and lane%4 + 4; AHEAD passes ahead, so the loads of AHEAD + 1 passes are in flight) and writes
 * them to the scratch, where each lane then reads its accumulator-layout words, adds, rounds and writes them
 * back; then every lane reads 8 channels back for one 16-byte store (128 contiguous bytes per row per pass). A
 * lane stores exactly the vectors it loaded, after loading them, so y may alias the residual. scr: 1 KB, 16-byte
 * aligned, this warp's alone. Rows past gm and 8-channel groups past gn (K % 8 == 0) are neither loaded nor
 * stored.
 * RES: EPI_NONE, or a.residual is set and EPI_ADD adds it, EPI_GATE gates by it (the kernel dispatches on
 * a.residual, so that without one none of the residual code is compiled in: a runtime test instead made the 1x1
 * convs without a residual slower, perf-log step 31). AHEAD = 0 with RES: the residual was staged by tile_stage_residual into rst (landed and
 * visible to the warp), and each pass adds its words from there: no global loads, no copy into the scratch. */
template <int MB, int NT8, int AHEAD, int RES>
__device__ __forceinline__ void tile_epilogue_rows(const conv_args &a, const float (&acc)[MB][NT8][4], int mrow,
                                                   int nbase, int lane, float *scr, const unsigned *rst = nullptr,
                                                   epi_stats *stats = nullptr) {
    static_assert(NT8 % 8 == 0, "chunks of eight n8 tiles");
    static_assert(!STATS || RES != EPI_ADD, "a conv whose output a BatchNorm reads has no residual");
    (void)stats;
    constexpr int NP = NT8 / 8 * MB * 2; /* passes: (chunk, block, half) */
    constexpr bool STAGED = RES && AHEAD == 0;
    act_t *y = (act_t *)a.out;
    const act_t *res = (const act_t *)a.residual;
    unsigned *w = (unsigned *)scr;
    /* g: the lane's row in both roles (accumulator row g; read-back row lane/4); t4: its word of an n8 tile when
     * writing, its first 16-byte group (t4 and t4 + 4) when reading back */
    const int g = lane >> 2, t4 = lane & 3;
    auto row_of = [&](int p) { return epi_pass_row<MB>(mrow, p, g); };
    auto col_of = [&](int p, int k) { return epi_pass_col<MB>(nbase, p, t4, k); };
    uint4 rv[AHEAD + 1][2]; /* [pass % (AHEAD + 1)][k] (unused without RES) */
    auto load_res = [&](int p) {
        const int m = row_of(p);
#pragma unroll
        for (int k = 0; k < 2; k++) {
            const int n = col_of(p, k);
            rv[p % (AHEAD + 1)][k] = uint4{0u, 0u, 0u, 0u};
            if (out_ok(a, m) && n < a.gn) rv[p % (AHEAD + 1)][k] = *(const uint4 *)(res + out_at(a, m) + n);
        }
    };
    if (RES && !STAGED)
#pragma unroll
        for (int p = 0; p < AHEAD && p < NP; p++) load_res(p);
#pragma unroll
    for (int c = 0; c < NT8 / 8; c++) {
#if STATS
        float sums[32]; /* stats_flush's v */
#pragma unroll
        for (int i = 0; i < 32; i++) sums[i] = 0.0f;
#endif
        float2 sc[8], sh[8];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const int n = nbase + c * 64 + j * 8 + 2 * t4;
            const bool ok = n < a.gn;
            sc[j] = a.scale && ok ? *(const float2 *)(a.scale + n) : make_float2(1.0f, 1.0f);
            sh[j] = a.shift && ok ? *(const float2 *)(a.shift + n) : make_float2(0.0f, 0.0f);
        }
#pragma unroll
        for (int b = 0; b < MB; b++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int p = (c * MB + b) * 2 + h;
                if (RES && !STAGED && p + AHEAD < NP) load_res(p + AHEAD);
                __syncwarp(); /* the previous pass's reads are done */
                if (RES && !STAGED) {
#pragma unroll
                    for (int k = 0; k < 2; k++)
                        *(uint4 *)(w + epi_row_word(g, t4 + 4 * k, 0)) = rv[p % (AHEAD + 1)][k];
                    __syncwarp();
                }
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    const int wi = epi_row_word(g, j, t4);
                    float v0 = acc[b][c * 8 + j][2 * h] * sc[j].x + sh[j].x;
                    float v1 = acc[b][c * 8 + j][2 * h + 1] * sc[j].y + sh[j].y;
                    if (RES) {
                        const unsigned u = STAGED ? rst[p * 256 + wi] : w[wi];
                        if (RES == EPI_GATE)
                            v0 = act_to_f32((act_t)(u & 0xffffu)) > 0.0f ? v0 : 0.0f,
                            v1 = act_to_f32((act_t)(u >> 16)) > 0.0f ? v1 : 0.0f;
                        else v0 += act_to_f32((act_t)(u & 0xffffu)), v1 += act_to_f32((act_t)(u >> 16));
                    }
                    if (a.relu) v0 = v0 > 0.0f ? v0 : 0.0f, v1 = v1 > 0.0f ? v1 : 0.0f;
                    w[wi] = act2_pack(v0, v1);
                }
                __syncwarp();
                const int m = row_of(p);
#pragma unroll
                for (int k = 0; k < 2; k++) {
                    const int n = col_of(p, k);
                    const uint4 u = *(const uint4 *)(w + epi_row_word(g, t4 + 4 * k, 0));
                    if (out_ok(a, m) && n < a.gn) {
                        *(uint4 *)(y + out_at(a, m) + n) = u;
#if STATS /* the values as stored: what the BatchNorm normalises */
                        float f[8];
                        act_unpack_vec(u, f);
#pragma unroll
                        for (int e = 0; e < 8; e++) {
                            sums[k * 8 + e] += f[e];
                            if (RES != EPI_GATE) sums[16 + k * 8 + e] += f[e] * f[e];
                        }
#endif
                    }
                }
            }
#if STATS
        stats_flush<RES != EPI_GATE>(a, sums, nbase + c * 64, lane, *stats);
#endif
    }
}
#endif

/* the transposed tile's per-channel scale and shift: a lane's accumulator rows are channels n and n + 8 (1 and 0
 * past the last channel, or where the epilogue has none) */
__device__ __forceinline__ void cols_scale_shift(const conv_args &a, int n, float sc[2], float sh[2]) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const bool ok = n + 8 * h < a.gn;
        sc[h] = a.scale && ok ? a.scale[n + 8 * h] : 1.0f;
        sh[h] = a.shift && ok ? a.shift[n + 8 * h] : 0.0f;
    }
}

/* One warp's transposed tile (conv2d_warpspec.cu, SWAP=1): acc[j][2h + e] is output channel cbase + g + 8h of pixel
 * (GEMM row) mbase + 8j + 2*t4 + e, for the warp's 16 channels and NT8*8 pixels. Per pass of 16 pixels (two n8
 * tiles): every value through scale/shift/ReLU, rounded, into the scratch as [16 pixels][16 channels] act_t (the
 * two 16-byte halves of a pixel's row swapped for pixels 4-7 and 12-15 of the pass, so the lanes of one store,
 * which write pixels 2*t4 and channels g, g + 8, hit distinct banks), then each lane reads back 8 channels of one
 * pixel (pixel lane/2, half lane%2) and stores them: 32 bytes of a pixel's row per two lanes. K % 8 == 0 (the host
 * checks), so a half is wholly inside the output or wholly past it. scr: 512 bytes of this warp's own. */
template <int NT8>
__device__ __forceinline__ void tile_epilogue_cols(const conv_args &a, const float (&acc)[NT8][4], int mbase, int cbase,
                                                   int lane, float *scr) {
    static_assert(NT8 % 2 == 0, "passes of two n8 tiles");
    act_t *y = (act_t *)a.out;
    act_t *t = (act_t *)scr;
    const int g = lane >> 2, t4 = lane & 3;
    float sc[2], sh[2];
    cols_scale_shift(a, cbase + g, sc, sh);
    /* element (pixel px of the pass, channel c of the warp's 16) in the scratch */
    auto at = [](int px, int c) { return px * 16 + (((c >> 3) ^ ((px >> 2) & 1)) << 3) + (c & 7); };
    const int rpx = lane >> 1, rhalf = lane & 1; /* the read-back role */
#pragma unroll
    for (int p = 0; p < NT8 / 2; p++) {
        __syncwarp(); /* the previous pass's reads are done */
#pragma unroll
        for (int jj = 0; jj < 2; jj++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int h = e >> 1;
                float v = acc[2 * p + jj][e] * sc[h] + sh[h];
                if (a.relu) v = v > 0.0f ? v : 0.0f;
                t[at(jj * 8 + 2 * t4 + (e & 1), g + 8 * h)] = f32_to_act(v);
            }
        __syncwarp();
        const int m = mbase + 16 * p + rpx, n = cbase + 8 * rhalf;
        const uint4 u = *(const uint4 *)(t + at(rpx, 8 * rhalf));
        if (out_ok(a, m) && n < a.gn) *(uint4 *)(y + out_at(a, m) + n) = u;
    }
}

/* tile_epilogue_cols with its stores handed to the copy engine, a piece at a time: the warp's 16 channels (cbase ..)
 * x NT8*8 pixels (mbase ..) after scale/shift and ReLU, rounded, written by stmatrix.trans into `box` (this warp's
 * own, pixel-major, 16 channels = 32 bytes per pixel, 16-byte aligned) as OST_PIECES pieces of NT8*8/OST_PIECES
 * pixels, each the y map's box. The stores are issued later, by ost_store, one piece every few slices of the
 * next tile's mainloop (conv2d_warpspec.cu), so that the CTAs, which all finish their tiles together, do not write their
 * outputs in one burst; a TMA store clips at the tensor's edges. Before the box is written again, lane 0 issues
 * whatever is left of the previous tile and waits until its stores have read the box (bulk_wait_read); the warp
 * then goes on together. `ost` is lane 0's record of the pieces not yet stored. */
#define OST_PIECES CONV_OST_PIECES
struct ost_state {
    int left, m0, c0; /* pieces of the box not yet stored; the box's origin in y */
};
/* lane 0: store the next piece of the box, or every piece left (flush) */
template <int NT8>
__device__ __forceinline__ void ost_store(const void *y_map, const act_t *box, ost_state &ost, bool flush) {
    constexpr int ROWS = NT8 * 8 / OST_PIECES;
    for (; ost.left > 0; ) {
        const int piece = OST_PIECES - ost.left;
        tma_store_tile_2d(y_map, box + piece * ROWS * 16, ost.c0, ost.m0 + piece * ROWS);
        bulk_commit();
        ost.left--;
        if (!flush) break;
    }
}
#if ACT != ACT_F32 /* conv2d_warpspec.cu's (F16/BF16); act2_pack and stmatrix move 16-bit elements */
template <int NT8>
__device__ __forceinline__ void tile_epilogue_cols_tma(const conv_args &a, const void *y_map, const float (&acc)[NT8][4],
                                                       int mbase, int cbase, int lane, act_t *box, ost_state &ost) {
    static_assert(NT8 % 2 == 0, "stmatrix.x4: two n8 tiles (16 pixels) x two 8-channel halves");
    static_assert((NT8 * 8) % OST_PIECES == 0, "whole pieces of the box");
    const int g = lane >> 2;
    float sc[2], sh[2];
    cols_scale_shift(a, cbase + g, sc, sh);
    if (lane == 0) {
        ost_store<NT8>(y_map, box, ost, true);
        bulk_wait_read<0>();
    }
    __syncwarp();
    const int mi = lane >> 3, row = lane & 7; /* the matrix and memory row whose address this lane gives */
#pragma unroll
    for (int j = 0; j < NT8; j += 2) {
        unsigned r[4];
#pragma unroll
        for (int k = 0; k < 4; k++) { /* matrix k: pixels of n8 tile j + k/2, channels 8*(k%2) .. */
            const int jj = j + (k >> 1), h = k & 1;
            float v0 = acc[jj][2 * h] * sc[h] + sh[h], v1 = acc[jj][2 * h + 1] * sc[h] + sh[h];
            if (a.relu) v0 = v0 > 0.0f ? v0 : 0.0f, v1 = v1 > 0.0f ? v1 : 0.0f;
            r[k] = act2_pack(v0, v1);
        }
        stmatrix_x4_trans(box + ((j + (mi >> 1)) * 8 + row) * 16 + (mi & 1) * 8, r);
    }
    fence_proxy_async(); /* this lane's writes, visible to the copy engine */
    __syncwarp();
    ost.left = OST_PIECES, ost.m0 = mbase, ost.c0 = cbase;
}
#endif

#endif
