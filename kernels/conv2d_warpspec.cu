/* conv2d_warpspec.cu -- forward convolution on Hopper's wgmma (sm_90a) with warp-specialised roles: one producer
 * warpgroup copies the operand slices, two consumer warpgroups multiply. The implicit GEMM, loads, swizzle and
 * epilogue are conv2d_wgmma.cu's (conv2d_loader.cuh, wgmma.cuh, conv2d_epilogue.cuh).
 *
 * Shapes: a consumer's tile is BM x BN (BM = 64 x MB pixel rows; BN 64, 128 or 256 output channels), BK = 64
 * channels per slice; the grid is persistent: CTA b takes tiles b, b + gridDim.x, ...
 * Roles and invariants:
 *   - The producer (registers lowered by setmaxnreg) loads every slice of the CTA's tiles in order into a ring of
 *     STAGES stages: slice g into stage g % STAGES once slice g - STAGES has been released (empty[s]); a stage is
 *     full (full[s]) when its copies have landed and been fenced for the tensor cores (fence.proxy.async).
 *   - A consumer (registers raised) waits for full[s], issues the slice's wgmma, and releases the previous
 *     slice's stage once that batch has retired (one batch left running). Ping-pong (default): consumer i % 2
 *     takes the CTA's i-th tile, and waits before a tile until the other has issued every slice of the tile
 *     before (turn[]), so the mainloops alternate, one consumer's epilogue runs while the other multiplies, and a
 *     consumer only ever waits for a stage's next completion (mbar_wait's parity is unambiguous).
 *   - The epilogue (conv2d_epilogue.cuh) runs through scratch of the consumer's own ahead of the ring, never in
 *     a ring stage, which only an mbarrier would order against the producer's next copy into it.
 * Options (-D, one per row option of src/cuda/conv2d_table.c; the measurements are docs/perf-log.md's):
 *   COOP=1   cooperative (TMA rows only): both consumers on one BM x BN tile, half its rows each, so a stage
 *            carries one B slice for twice the rows; both release every stage, no turns (step 30).
 *   BRES=1   filter-resident: CTA b owns column block b % n_tiles for the whole launch, its filter rows copied
 *            once (bfull), the ring carrying only A slices; where ktiles slices of B and the ring fit (step 20).
 *   TMA=1    the producer is one thread issuing tensor-memory-accelerator copies (C % 64 == 0): A through x's
 *            im2col map (zeros in the padding and past the last image), B through the filter's tiled map, both in
 *            the 128-byte swizzle, completing on full[s] by byte count (expect_tx); maps in conv_tma_args (step 28).
 *   pairs    (TMA rows, a.pair_ktiles > 0: src/cuda/conv2d_pair.c) a tile's reduction is the first convolution's
 *            pair_ktiles slices (a_map, b_map), then the second's (a2_map, b2_map), into the same accumulators.
 *   RSM=1    (TMA rows) each consumer warp stages its tile's residual in shared memory by cp.async during the
 *            mainloop; fewer ring stages make the room (step 43).
 *   SWAP=1   (TMA rows, 64 channels per consumer, no residual) the transposed tile, D[channel][pixel]: the filter
 *            slice is wgmma's m64 operand and the BM pixels its n (m64nBMk16), fewer operand bytes per
 *            multiply-add; with COOP consumer i takes channels 64i .. 64i + 63; BM = 192 fills whole rounds of
 *            tiles on some shapes; the epilogue transposes back (tile_epilogue_cols) (steps 47, 48).
 *   OST=1    (transposed tiles) each consumer warp rounds its 16 channels x BM pixels into a box of shared memory
 *            (stmatrix) that lane 0 stores by TMA (targs.y_map) in CONV_OST_PIECES pieces spread over the next
 *            tile's mainloop; every piece has been issued and has read the box before it is written again
 *            (tile_epilogue_cols_tma, ost_store); the boxes cost ring stages (steps 50, 52).
 *   STATS=1  (pixel-major rows, no residual but FT_GATE's) the epilogue also writes per-channel sums of y and y^2
 *            over each consumer's rows of a tile into a.stats, for the training BatchNorm that reads y
 *            (conv2d_epilogue.cuh's stats_flush): the consumer's warps exchange them through STATS_BYTES of their
 *            own (step 87). With FT_GATE the sums of the gated dx alone, where a.stats is set (step 101).
 *   FILT_T=1 (TMA rows, no pair) a dgrad over dy reading the forward's filter w (K', R', S', C') as it is, where
 *            the other programs read it flipped and transposed by a rewrite kernel first: a slice of tap (tr, ts)
 *            and channels c0.. is BN / 64 boxes of w's tap a.ft_base + tr * a.ft_dr + ts * a.ft_ds, 64 of its K' x
 *            64 of its C' each (b_map), which wgmma reads MN-major; a stride-1 dgrad's forward programs, and every
 *            GROUPED program (step 88).
 *   FT_GATE=1 (FILT_T, not GROUPED; STATS, no RSM) the residual gates instead of adding: it is the output of the
 *            ReLU before the forward conv, whose backward the dgrad takes in (conv2d_epilogue.cuh's EPI_GATE, step
 *            98); the gated dx's sums are the bias gradient of the conv before that ReLU (step 101).
 * Specialisation: BM, BN, STAGES, BRES, TMA, COOP, RSM, SWAP, OST, ACT; OUT_PHASE (conv2d_epilogue.cuh); STATS; FILT_T;
 * FT_GATE; GROUPED (the phases of a strided dgrad in one launch: the kernel at the end of this file).
 */
#include "common.cuh"
#include "params.cuh"
#include "conv2d_epilogue.cuh"
#include "conv2d_loader.cuh"
#include "wgmma.cuh"

#if !defined(BM) || !defined(BN) || !defined(STAGES)
#error "conv2d_warpspec.cu needs -DBM -DBN -DSTAGES"
#endif
#if ACT == ACT_F32
#error "conv2d_warpspec.cu takes F16 or BF16 activations"
#endif

#define BK 64
#define NT 384             /* producer warpgroup + two consumer warpgroups */
#ifndef COOP
#define COOP 0
#endif
#ifndef SWAP
#define SWAP 0
#endif
#ifndef OST
#define OST 0
#endif
/* rows a consumer multiplies: all of its tile's, or its half of the shared one (a transposed tile's consumers
 * split its channels instead) */
#define CBM (COOP && !SWAP ? BM / 2 : BM)
#define MB (CBM / 64)            /* m64 blocks per consumer */
#define NT8 (BN / 8)
#ifndef BRES
#define BRES 0
#endif
#ifndef TMA
#define TMA 0
#endif
#if BRES
#define STAGE_ELEMS (BM * BK) /* a ring stage: an A slice; the B slices follow the ring */
#else
#define STAGE_ELEMS ((BM + BN) * BK) /* a ring stage: an A slice, then a B slice */
#endif
/* the epilogue's scratch, 1 KB per consumer warp, ahead of the ring; OST: each consumer warp's box of 16 channels x
 * BM pixels instead */
#define EPI_WARP_BYTES (OST ? 32 * BM : 1024)
#define EPI_BYTES (8 * EPI_WARP_BYTES)
/* a consumer's accumulators: MB m64 blocks x NT8 n8 tiles, or transposed (SWAP) one m64 block of channels (of a
 * cooperative tile: consumer i's channels 64i ..) x all BM pixels */
#define ACC_MB (SWAP ? 1 : MB)
#define ACC_NT8 (SWAP ? BM / 8 : NT8)
#ifndef RSM
#define RSM 0
#endif
#ifndef FILT_T
#define FILT_T 0
#endif
#ifndef FT_GATE
#define FT_GATE 0
#endif
/* what a residual does in the epilogue (conv2d_epilogue.cuh): added, or with FT_GATE a gate */
#define RES_OP (FT_GATE ? EPI_GATE : EPI_ADD)
#ifndef GROUPED
#define GROUPED 0
#endif
#define EPI_PASSES (BN / 64 * MB * 2) /* passes of 8 rows x 64 channels in a warp's epilogue (tile_epilogue_rows) */
/* RSM: the staged residual, after the scratch: per consumer warp one KB per pass */
#define RSM_BYTES (RSM ? 8 * EPI_PASSES * 1024 : 0)
/* passes of residual loads a TMA row's epilogue keeps in flight ahead of the pass it stores (8 registers each):
 * as many as the consumers' registers hold without spills (test_nvrtc) */
#define RES_AHEAD (MB == 1 ? 3 : 2)
/* with FT_GATE's sums (STATS) in registers too: a pass fewer */
#define GATE_AHEAD (MB == 1 ? 2 : 1)
/* STATS: each consumer's two exchange buffers of 4 warps x 128 sums (conv2d_epilogue.cuh's stats_flush) */
#define STATS_BYTES (STATS ? 2 * 2 * 4 * 128 * 4 : 0)
#define SMEM_BYTES (EPI_BYTES + RSM_BYTES + STATS_BYTES + STAGE_ELEMS * 2 * STAGES + 1024) /* + slack to align to 1 KB (BRES: + B) */
/* slices whose copies a producer thread keeps in flight. At most STAGES - 2: slice g's stage is released once
 * slice g + 1 has been multiplied, and slice g + 1 is announced DEPTH iterations after its copies were issued;
 * the producer waits for that release before issuing slice g + STAGES */
#define DEPTH (STAGES - 2 < 4 ? STAGES - 2 : 4)
/* registers per thread after the role split (setmaxnreg). The launch gives every thread 168 (384 threads,
 * __launch_bounds__(NT, 1)); the producer hands back what its loader does not need (the least each loader fits
 * in without spills, test_nvrtc: its 64-bit origin and two coordinates per A row grow with BM) and the two
 * consumers take exactly that: setmaxnreg.inc waits until the registers are free, so the sums must balance. */
#define ENTRY_REGS 168
#if TMA /* one thread issuing bulk copies: the fewest registers that leave its loop unspilled */
#define PRODUCER_REGS 40
#else
#define PRODUCER_REGS (BM == 64 ? (BRES ? 80 : 64) : 88)
#endif
#define CONSUMER_REGS ((ENTRY_REGS + (ENTRY_REGS - PRODUCER_REGS) / 2) & ~7)
static_assert(128 * PRODUCER_REGS + 256 * CONSUMER_REGS <= NT * ENTRY_REGS && NT * ENTRY_REGS <= 65536,
              "registers handed back cover the registers taken");
static_assert(MB >= 1 && CBM == 64 * MB, "BM: whole m64 blocks per consumer");
static_assert(!COOP || (TMA && !BRES), "cooperative rows: TMA copies, B in the ring");
static_assert(!RSM || TMA, "a staged residual: TMA rows (the cp.async rows' producer owns the cp.async groups)");
static_assert(BN == 128 || BN == 256 || (TMA && BN == 64), "wgmma n128 or n256 (n64: TMA rows, no cp.async loader)");
static_assert(ACC_MB * ACC_NT8 * 4 <= 128, "accumulators of a consumer thread");
static_assert(!SWAP || (TMA && !BRES && !RSM && BN == (COOP ? 128 : 64) && (BM == 64 || BM == 128 || BM == 192 || BM == 256)),
              "the transposed tile: a TMA row, 64 channels per consumer, BM pixels a wgmma n");
static_assert(!OST || (SWAP && TMA), "TMA stores: the transposed tiles' epilogue (tile_epilogue_cols_tma)");
static_assert(!OST || !OUT_PHASE, "a dgrad phase's pixels are not y's rows: no TMA store (conv2d_programs.c's phase defines)");
static_assert(!STATS || (!SWAP && !OUT_PHASE), "sums per channel: a pixel-major tile stored as y's rows");
static_assert(!FILT_T || (TMA && STATS == FT_GATE && (!OUT_PHASE || GROUPED)), "the filter read transposed: a TMA row's dgrad");
static_assert(!FT_GATE || (FILT_T && !GROUPED && STATS && !RSM), "the gate: a direct stride-1 dgrad's, summing dx");
static_assert(STAGES >= 3 && DEPTH >= 1 && DEPTH <= STAGES - 2, "the producer must not wait on its own arrivals");
static_assert(SMEM_BYTES <= 227 * 1024, "shared memory of one CTA");

__device__ __forceinline__ void regs_lower(void) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGS));
#endif
}
__device__ __forceinline__ void regs_raise(void) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER_REGS));
#endif
}

#if FILT_T
/* slice (tap (tr, ts), channels c0 ..) of a dgrad's filter read transposed (map: the forward's filter, a: the dgrad's
 * convolution), output channels n0 .. n0 + BN - 1: BN / 64 boxes of 64 reduction rows x 64 output channels,
 * consecutive (wgmma.cuh's MN-major operand); zeros past C' */
__device__ __forceinline__ void load_filter_t(const conv_tma_map *map, const conv_args &a, act_t *dst,
                                              unsigned long long *bar, int c0, int tr, int ts, int n0) {
    const int tap = a.ft_base + tr * a.ft_dr + ts * a.ft_ds;
#pragma unroll
    for (int j = 0; j < BN / 64; j++) tma_load_tile_3d(map, dst + j * 64 * BK, bar, n0 + 64 * j, tap, c0);
}
#endif

#if !GROUPED
#if TMA
extern "C" __global__ void __launch_bounds__(NT, 1) conv2d_fprop_warpspec(const __grid_constant__ conv_tma_args targs) {
    pdl_enter();
    const conv_args &a = targs.a;
#else
extern "C" __global__ void __launch_bounds__(NT, 1) conv2d_fprop_warpspec(const conv_args a) {
    pdl_enter();
#endif
#ifdef __CUDA_ARCH__
    extern __shared__ __align__(128) unsigned char smem_raw[];
#else /* the emulator: static is per block; BRES: room for the largest B the host sends */
    __shared__ __align__(128) unsigned char smem_raw[BRES ? 227 * 1024 : SMEM_BYTES];
#endif
    __shared__ unsigned long long full[STAGES], empty[STAGES], turn[2], bfull;
#if STATS
    __shared__ unsigned long long sbar[2]; /* the emulator's barriers of each consumer's sums (stats_flush) */
#endif
    unsigned char *smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
    unsigned char *ring = smem + EPI_BYTES + RSM_BYTES + STATS_BYTES;
    act_t(*As)[STAGE_ELEMS] = reinterpret_cast<act_t(*)[STAGE_ELEMS]>(ring); /* stage s: A tile, then B tile */
#if BRES
    act_t(*Bs)[BN * BK] = reinterpret_cast<act_t(*)[BN * BK]>(ring + (size_t)STAGE_ELEMS * 2 * STAGES); /* per slice */
#else
    act_t(*Bs)[STAGE_ELEMS] = reinterpret_cast<act_t(*)[STAGE_ELEMS]>(ring + (size_t)BM * BK * 2);
#endif

    const int tid = threadIdx.x, lane = tid & 31, warp = (tid >> 5) & 3, role = tid >> 7;
    const int n_tiles = (a.gn + BN - 1) / BN, m_tiles = (a.gm + BM - 1) / BM;
    const int ktiles = (a.gk + BK - 1) / BK;
#if BRES
    if ((int)gridDim.x % n_tiles != 0) __trap(); /* a CTA keeps one column block */
    const int col = (int)blockIdx.x % n_tiles, row0 = (int)blockIdx.x / n_tiles, rows_step = (int)gridDim.x / n_tiles;
    const int my_tiles = row0 < m_tiles ? (m_tiles - 1 - row0) / rows_step + 1 : 0;
    auto tile_origin = [&](int i, int &m0, int &n0) { m0 = (row0 + i * rows_step) * BM, n0 = col * BN; };
    const unsigned need = (unsigned)(SMEM_BYTES + ktiles * BN * BK * 2);
#else
    const int tiles = m_tiles * n_tiles;
    const int my_tiles = (int)blockIdx.x < tiles ? (tiles - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;
    auto tile_origin = [&](int i, int &m0, int &n0) { /* of this CTA's i-th tile: N tiles of a row block in turn */
        const int t = (int)blockIdx.x + i * (int)gridDim.x;
        m0 = (t / n_tiles) * BM, n0 = (t % n_tiles) * BN;
    };
    const unsigned need = (unsigned)SMEM_BYTES;
#endif
    const int total = my_tiles * ktiles; /* slices of this CTA, over all its tiles (host: < 2^31) */
    if (total > 0 && dynamic_smem_bytes() < need) __trap(); /* every stage is reached (and every B slice) */

    const unsigned loaders = TMA ? 1u : 128u; /* arrivals that complete a full[] or bfull phase */
    if (tid == 0) {
        for (int s = 0; s < STAGES; s++) mbar_init(&full[s], loaders), mbar_init(&empty[s], COOP ? 8 : 4);
        mbar_init(&turn[0], 4), mbar_init(&turn[1], 4), mbar_init(&bfull, loaders);
#if STATS
        mbar_init(&sbar[0], 4), mbar_init(&sbar[1], 4);
#endif
    }
    __syncthreads();

#if TMA
    if (role == 0) { /* ---- the producer: thread 0 issues every copy ---- */
        regs_lower();
        if (tid != 0) return;
        tma_prefetch_map(&targs.a_map);
        tma_prefetch_map(&targs.b_map);
        if (FILT_T && a.pair_ktiles > 0) __trap(); /* no pair reads its filter transposed (src/cuda/conv2d_fast.c) */
        const int k1 = a.pair_ktiles > 0 ? a.pair_ktiles : ktiles; /* slices of the first convolution */
        if (a.pair_ktiles > 0) {
            tma_prefetch_map(&targs.a2_map);
            tma_prefetch_map(&targs.b2_map);
        }
        int m0 = 0, n0 = 0, img = 0, hb = 0, wb = 0; /* the tile's origin; its first pixel's filter base */
        int p = 0, q = 0;                             /* the tile's first output pixel */
        int kt = 0, tile = 0, c0 = 0, tr = 0, ts = 0; /* the slice: channels c0.., filter tap (tr, ts) */
        int cc = a.c, cs = a.s;                       /* channels and filter width of the current convolution */
#if BRES
        if (total > 0) { /* the column block's filter rows, every slice (of both convolutions of a pair), once */
            tile_origin(0, m0, n0);
            mbar_arrive_expect_tx(&bfull, (unsigned)(ktiles * BN * BK * 2));
            for (int k = 0; k < ktiles; k++) {
#if FILT_T
                const int per_tap = a.c / BK, tap = k / per_tap;
                load_filter_t(&targs.b_map, a, Bs[k], &bfull, (k - tap * per_tap) * BK, tap / a.s, tap % a.s, n0);
#else
                tma_load_tile_2d(k < k1 ? &targs.b_map : &targs.b2_map, Bs[k], &bfull, (k < k1 ? k : k - k1) * BK, n0);
#endif
            }
        }
#endif
        for (int g = 0; g < total; g++) {
            const int s = g % STAGES;
            if (g >= STAGES) mbar_wait(&empty[s], (unsigned)(g / STAGES - 1) & 1u); /* slice g - STAGES released */
            if (kt == 0) {
                tile_origin(tile, m0, n0);
                const int pq = a.p * a.q;
                img = m0 / pq;
                p = (m0 - img * pq) / a.q, q = m0 - img * pq - p * a.q;
                hb = p * a.stride_h - a.pad_h, wb = q * a.stride_w - a.pad_w;
                c0 = 0, tr = 0, ts = 0, cc = a.c, cs = a.s;
            } else if (kt == k1) { /* a pair: the second convolution's slices, from the same output pixels */
                hb = p * a.stride2_h - a.pad2_h, wb = q * a.stride2_w - a.pad2_w;
                c0 = 0, tr = 0, ts = 0, cc = a.c2, cs = a.s2;
            }
            const bool second = kt >= k1;
            mbar_arrive_expect_tx(&full[s], (unsigned)(STAGE_ELEMS * 2));
            tma_load_im2col_4d(second ? &targs.a2_map : &targs.a_map, As[s], &full[s], c0, wb, hb, img,
                               (unsigned short)ts, (unsigned short)tr);
#if !BRES && FILT_T
            load_filter_t(&targs.b_map, a, Bs[s], &full[s], c0, tr, ts, n0);
#elif !BRES
            tma_load_tile_2d(second ? &targs.b2_map : &targs.b_map, Bs[s], &full[s], (second ? kt - k1 : kt) * BK, n0);
#endif
            c0 += BK; /* the host launches TMA rows only where C % 64 == 0 (C2 too): a slice is one filter tap */
            if (c0 == cc) {
                c0 = 0;
                if (++ts == cs) ts = 0, tr++;
            }
            if (++kt == ktiles) kt = 0, tile++;
        }
        return;
    }
#else
    if (role == 0) { /* ---- the producer ---- */
        regs_lower();
        if (a.pair_ktiles > 0) __trap(); /* pairs run on the TMA rows only (src/cuda/conv2d.c) */
        conv_tile_loader<BM, BN, BK, 128> ld;
        int tile = 0, kt = 0;
#if BRES
        if (total > 0) { /* the column block's filter rows, every slice, as the first copy group */
            int m0, n0;
            tile_origin(0, m0, n0);
            ld.init(a, m0, n0, tid, 0);
            for (int k = 0; k < ktiles; k++) ld.load_b(a, Bs[k]), ld.next(a);
        }
        cp_async_commit();
        bool b_told = false; /* bfull arrived at: with the first wait, which covers the group above */
#endif
        for (int g = 0; g < total; g++) {
            const int s = g % STAGES;
            if (g >= STAGES) mbar_wait(&empty[s], (unsigned)(g / STAGES - 1) & 1u); /* slice g - STAGES released */
            if (kt == 0) {
                int m0, n0;
                tile_origin(tile, m0, n0);
                ld.init(a, m0, n0, tid, 0);
            }
#if BRES
            ld.load_a(a, As[s]);
            ld.next(a);
#else
            ld.load(a, As[s], Bs[s]);
#endif
            cp_async_commit();
            if (++kt == ktiles) kt = 0, tile++;
            if (g >= DEPTH) { /* slice g - DEPTH has landed: visible to the async proxy, then announced */
                cp_async_wait<DEPTH>();
                fence_proxy_async();
#if BRES
                if (!b_told) mbar_arrive(&bfull), b_told = true;
#endif
                mbar_arrive(&full[(g - DEPTH) % STAGES]);
            }
        }
        cp_async_wait<0>();
        fence_proxy_async();
#if BRES
        if (!b_told) mbar_arrive(&bfull);
#endif
        for (int g = total - DEPTH > 0 ? total - DEPTH : 0; g < total; g++) mbar_arrive(&full[g % STAGES]);
        return;
    }
#endif

    /* ---- a consumer: tiles role-1, role+1, ... of this CTA (cooperative: every tile, rows of its half) ---- */
    regs_raise();
    const int me = role - 1;
    const int row_off = COOP && !SWAP ? me * CBM : 0; /* the consumer's first row within the tile */
    const int ch_off = COOP && SWAP ? me * 64 : 0;     /* SWAP: the consumer's first channel within the tile */
    (void)ch_off;
    /* RSM: this warp's staged residual (one KB per epilogue pass) */
    unsigned *rst = (unsigned *)(smem + EPI_BYTES + (size_t)(me * 4 + warp) * EPI_PASSES * 1024);
    (void)rst;
    float acc[ACC_MB][ACC_NT8][4];
    if (SWAP && a.residual) __trap(); /* the host runs a residual on the row's pixel-major twin */
#if STATS /* a stats program: for a conv a BatchNorm reads; with FT_GATE a.stats may be null (no sums wanted) */
    if (FT_GATE ? !a.residual : a.residual || !a.stats) __trap();
    epi_stats est = {(float *)(smem + EPI_BYTES + RSM_BYTES) + me * 2 * 4 * 128, &sbar[me], 0u, warp, 0, 1 + me};
#endif
#if BRES
    if (me < my_tiles) mbar_wait(&bfull, 0u); /* the filter slices are in */
#endif
#if OST /* lane 0: the pieces of this warp's box still to store, one every ost_every slices of the next tile */
    ost_state ost = {0, 0, 0};
    const int ost_every = ktiles / OST_PIECES > 1 ? ktiles / OST_PIECES : 1;
    act_t *ost_box = (act_t *)(smem + (size_t)((role - 1) * 4 + warp) * EPI_WARP_BYTES);
#endif
    for (int i = COOP ? 0 : me, j = 0; i < my_tiles; i += COOP ? 1 : 2, j++) {
        if (a.residual) { /* what this tile's epilogue will add: into shared memory (RSM) or L2 (a hint) while
                           * the mainloop runs */
            int pm0, pn0;
            tile_origin(i, pm0, pn0);
#if RSM
            __syncwarp(); /* every lane's reads of the region in the previous tile's epilogue are done */
            tile_stage_residual<MB, NT8>(a, pm0 + row_off + warp * 16, pn0, lane, rst);
#else
#pragma unroll
            for (int b = 0; b < MB; b++) tile_prefetch_residual<NT8>(a, pm0 + row_off + b * 64 + warp * 16, pn0, lane);
#endif
        }
        /* the other consumer has issued every slice of tile i - 1 (its completion number j - 1 + me) */
        if (!COOP && i > 0) mbar_wait(&turn[1 - me], (unsigned)(j - 1 + me) & 1u);
        acc_zero(acc);
        for (int kt = 0; kt < ktiles; kt++) {
            const int g = i * ktiles + kt, s = g % STAGES;
            mbar_wait(&full[s], (unsigned)(g / STAGES) & 1u);
#if SWAP /* the filter slice as the m64 operand, the tile's pixels as the n operand */
            wg_multiply_slice<1, BM, FILT_T, 0>(acc, Bs[s] + ch_off * BK, As[s], warp, lane);
#else
            wg_multiply_slice<MB, BN, 0, FILT_T>(acc, As[s] + row_off * BK, Bs[BRES ? kt : s], warp, lane);
#endif
            wg_commit_and_wait_prev(); /* slice g - 1's batch has retired: its stage is free */
            acc_fence_all(acc);
            if (kt > 0 && lane == 0) mbar_arrive(&empty[(g - 1) % STAGES]);
#if OST
            if (lane == 0 && ost.left > 0 && kt % ost_every == ost_every - 1)
                ost_store<ACC_NT8>(&targs.y_map, ost_box, ost, false);
#endif
        }
        if (!COOP && lane == 0) mbar_arrive(&turn[me]); /* the next tile's consumer may start issuing */
        wg_wait_all();
        acc_fence_all(acc);
        if (lane == 0) mbar_arrive(&empty[(i * ktiles + ktiles - 1) % STAGES]);
        int m0, n0;
        tile_origin(i, m0, n0);
        /* this warp's own scratch (OST: its box) */
        float *scr = (float *)(smem + (size_t)((role - 1) * 4 + warp) * EPI_WARP_BYTES);
#if SWAP && OST /* warp w holds channels n0 + 16w .. + 15 of all the tile's pixels */
        tile_epilogue_cols_tma<ACC_NT8>(a, &targs.y_map, acc[0], m0, n0 + ch_off + warp * 16, lane, (act_t *)scr, ost);
#elif SWAP
        tile_epilogue_cols<ACC_NT8>(a, acc[0], m0, n0 + ch_off + warp * 16, lane, scr);
#else
#if STATS
        est.chunk = (m0 + row_off) / CBM;
        tile_epilogue_rows<MB, NT8, FT_GATE ? GATE_AHEAD : 1, FT_GATE ? EPI_GATE : EPI_NONE>(
            a, acc, m0 + row_off + warp * 16, n0, lane, scr, nullptr, &est);
#else
        if (!a.residual) {
            tile_epilogue_rows<MB, NT8, 1, EPI_NONE>(a, acc, m0 + row_off + warp * 16, n0, lane, scr);
        } else if (RSM) { /* the staged residual: this lane's copies landed, then every lane's (cross-lane reads) */
            cp_async_wait<0>();
            __syncwarp();
            tile_epilogue_rows<MB, NT8, 0, RES_OP>(a, acc, m0 + row_off + warp * 16, n0, lane, scr, rst);
        } else if (TMA) { /* residual loads RES_AHEAD passes ahead: the TMA rows' consumers have the registers */
            tile_epilogue_rows<MB, NT8, RES_AHEAD, RES_OP>(a, acc, m0 + row_off + warp * 16, n0, lane, scr);
        } else { /* the cp.async rows' consumers have fewer (both epilogues in one program would spill) */
#pragma unroll
            for (int b = 0; b < MB; b++)
                tile_epilogue_smem<NT8>(a, acc[b], m0 + row_off + b * 64 + warp * 16, n0, lane, scr);
        }
#endif
#endif
    }
#if OST
    if (lane == 0) { /* the last tile's stores: issued, and done before the CTA (and its shared memory) goes */
        ost_store<ACC_NT8>(&targs.y_map, ost_box, ost, true);
        bulk_wait_all();
    }
#endif
}
#endif /* !GROUPED */

#if GROUPED
/* GROUPED=1: the phases of one strided dgrad in one persistent launch (src/cuda/conv2d_dgrad.c, "grouped"): the tile
 * list is phase 0's tiles, then phase 1's, ... (conv_group_args.tile_end), and CTA b takes tiles b, b + gridDim.x, ...
 * of it as the forward kernel above takes its own, so no SM idles at a phase's tail; a tile reads its phase's maps and
 * problem (g.a[p]: a stride-1 convolution over dy, OUT_PHASE's mapping into dx). The reduction length differs by
 * phase, so the ring's slice count g runs on over the tiles instead of being i * ktiles. TMA rows with pixel-major
 * tiles only (conv2d_programs.c's conv_group_row); each phase's filter slices read from the forward's filter (FILT_T,
 * its taps in g.a[p].ft_*). */
static_assert(TMA && OUT_PHASE && !BRES && !OST && !SWAP, "grouped phases: a TMA row's pixel-major tiles, in place");
/* tile t of the launch: its phase, and its origin within the phase's output */
__device__ __forceinline__ int group_tile(const conv_group_args &g, int t, int &m0, int &n0) {
    int p = 0;
    while (p + 1 < g.groups && t >= g.tile_end[p]) p++;
    const int local = t - (p ? g.tile_end[p - 1] : 0), n_tiles = (g.a[p].gn + BN - 1) / BN;
    m0 = (local / n_tiles) * BM, n0 = (local % n_tiles) * BN;
    return p;
}
__device__ __forceinline__ int group_ktiles(const conv_group_args &g, int p) { return (g.a[p].gk + BK - 1) / BK; }

extern "C" __global__ void __launch_bounds__(NT, 1) conv2d_fprop_warpspec(const __grid_constant__ conv_group_args g) {
    pdl_enter();
#ifdef __CUDA_ARCH__
    extern __shared__ __align__(128) unsigned char smem_raw[];
#else /* the emulator: static is per block */
    __shared__ __align__(128) unsigned char smem_raw[SMEM_BYTES];
#endif
    __shared__ unsigned long long full[STAGES], empty[STAGES], turn[2];
    unsigned char *smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
    unsigned char *ring = smem + EPI_BYTES + RSM_BYTES;
    act_t(*As)[STAGE_ELEMS] = reinterpret_cast<act_t(*)[STAGE_ELEMS]>(ring); /* stage s: A tile, then B tile */
    act_t(*Bs)[STAGE_ELEMS] = reinterpret_cast<act_t(*)[STAGE_ELEMS]>(ring + (size_t)BM * BK * 2);

    const int tid = threadIdx.x, lane = tid & 31, warp = (tid >> 5) & 3, role = tid >> 7;
    const int tiles = g.tile_end[g.groups - 1];
    const int my_tiles = (int)blockIdx.x < tiles ? (tiles - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;
    if (my_tiles > 0 && dynamic_smem_bytes() < (unsigned)SMEM_BYTES) __trap(); /* every stage is reached */
    if (tid == 0) {
        for (int s = 0; s < STAGES; s++) mbar_init(&full[s], 1u), mbar_init(&empty[s], COOP ? 8 : 4);
        mbar_init(&turn[0], 4), mbar_init(&turn[1], 4);
    }
    __syncthreads();

    if (role == 0) { /* ---- the producer: thread 0 issues every copy ---- */
        regs_lower();
        if (tid != 0) return;
        for (int p = 0; p < g.groups; p++) tma_prefetch_map(&g.a_map[p]), tma_prefetch_map(&g.b_map[p]);
        for (int i = 0, gs = 0; i < my_tiles; i++) {
            int m0, n0;
            const int p = group_tile(g, (int)blockIdx.x + i * (int)gridDim.x, m0, n0);
            const conv_args &a = g.a[p];
            const int pq = a.p * a.q, img = m0 / pq, op = (m0 - img * pq) / a.q, oq = m0 - img * pq - op * a.q;
            const int hb = op * a.stride_h - a.pad_h, wb = oq * a.stride_w - a.pad_w; /* the tile's filter base */
            int c0 = 0, tr = 0, ts = 0; /* the slice: channels c0.., filter tap (tr, ts) */
            for (int kt = 0, kn = group_ktiles(g, p); kt < kn; kt++, gs++) {
                const int s = gs % STAGES;
                if (gs >= STAGES) mbar_wait(&empty[s], (unsigned)(gs / STAGES - 1) & 1u); /* slice gs - STAGES released */
                mbar_arrive_expect_tx(&full[s], (unsigned)(STAGE_ELEMS * 2));
                tma_load_im2col_4d(&g.a_map[p], As[s], &full[s], c0, wb, hb, img, (unsigned short)ts, (unsigned short)tr);
#if FILT_T
                load_filter_t(&g.b_map[p], a, Bs[s], &full[s], c0, tr, ts, n0);
#else
                tma_load_tile_2d(&g.b_map[p], Bs[s], &full[s], kt * BK, n0);
#endif
                c0 += BK; /* C % 64 == 0 (the host): a slice is one filter tap */
                if (c0 == a.c) {
                    c0 = 0;
                    if (++ts == a.s) ts = 0, tr++;
                }
            }
        }
        return;
    }

    /* ---- a consumer: tiles role-1, role+1, ... of this CTA (cooperative: every tile, rows of its half) ---- */
    regs_raise();
    const int me = role - 1;
    const int row_off = COOP ? me * CBM : 0; /* the consumer's first row within the tile */
    unsigned *rst = (unsigned *)(smem + EPI_BYTES + (size_t)(me * 4 + warp) * EPI_PASSES * 1024);
    (void)rst;
    float acc[ACC_MB][ACC_NT8][4];
    for (int i = 0, j = 0, gs = 0; i < my_tiles; i++) { /* gs: the ring's count of tile i's first slice */
        int m0, n0;
        const int p = group_tile(g, (int)blockIdx.x + i * (int)gridDim.x, m0, n0), kn = group_ktiles(g, p);
        if (!COOP && i % 2 != me) { /* the other consumer's tile: its slices pass through the ring all the same */
            gs += kn;
            continue;
        }
        const conv_args &a = g.a[p];
        if (a.residual) {
#if RSM
            __syncwarp();
            tile_stage_residual<MB, NT8>(a, m0 + row_off + warp * 16, n0, lane, rst);
#else
#pragma unroll
            for (int b = 0; b < MB; b++) tile_prefetch_residual<NT8>(a, m0 + row_off + b * 64 + warp * 16, n0, lane);
#endif
        }
        /* the other consumer has issued every slice of tile i - 1 (its completion number j - 1 + me) */
        if (!COOP && i > 0) mbar_wait(&turn[1 - me], (unsigned)(j - 1 + me) & 1u);
        acc_zero(acc);
        for (int kt = 0; kt < kn; kt++) {
            const int gg = gs + kt, s = gg % STAGES;
            mbar_wait(&full[s], (unsigned)(gg / STAGES) & 1u);
            wg_multiply_slice<MB, BN, 0, FILT_T>(acc, As[s] + row_off * BK, Bs[s], warp, lane);
            wg_commit_and_wait_prev(); /* slice gg - 1's batch has retired: its stage is free */
            acc_fence_all(acc);
            if (kt > 0 && lane == 0) mbar_arrive(&empty[(gg - 1) % STAGES]);
        }
        if (!COOP && lane == 0) mbar_arrive(&turn[me]); /* the next tile's consumer may start issuing */
        wg_wait_all();
        acc_fence_all(acc);
        if (lane == 0) mbar_arrive(&empty[(gs + kn - 1) % STAGES]);
        float *scr = (float *)(smem + (size_t)((role - 1) * 4 + warp) * EPI_WARP_BYTES);
        if (!a.residual) {
            tile_epilogue_rows<MB, NT8, 1, EPI_NONE>(a, acc, m0 + row_off + warp * 16, n0, lane, scr);
        } else if (RSM) {
            cp_async_wait<0>();
            __syncwarp();
            tile_epilogue_rows<MB, NT8, 0, EPI_ADD>(a, acc, m0 + row_off + warp * 16, n0, lane, scr, rst);
        } else {
            tile_epilogue_rows<MB, NT8, RES_AHEAD, EPI_ADD>(a, acc, m0 + row_off + warp * 16, n0, lane, scr);
        }
        gs += kn, j++;
    }
}
#endif /* GROUPED */
