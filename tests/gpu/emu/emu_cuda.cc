/* emu_cuda.cc -- a stand-in libcuda.so.1 that runs the engine's kernels on the CPU, so the CUDA backend's host
 * code, its kernels and tests/gpu/test_gpu_ops.c can be exercised on a machine without a GPU.
 *
 * Device memory is host memory (filled with 0xFF bytes on allocation, i.e. NaN, like the tests' poison), with a
 * budget of CNN_EMU_MEM_MB (default 1024) MiB so out-of-memory paths can be tested. One stream, executed
 * synchronously. Modules are the shared objects emu_nvrtc.cc builds; cuLaunchKernel runs every block of the grid
 * in turn, one fiber per CUDA thread: __syncthreads() and warp shuffles are rendezvous points of the
 * fiber scheduler. It reports, as a sticky CUDA_ERROR_LAUNCH_FAILED with a message on stderr:
 *     barrier divergence  (some threads of a block exited while others wait at __syncthreads)
 *     deadlock            (threads wait at different kinds of rendezvous, or spin on mbarriers -- they yield
 *                         to the scheduler -- while no arrival happens in a whole round)
 * Stream capture records launches, copies and memsets, with copies of the kernel arguments, and a graph replays
 * them. Tensor maps (TMA) are encoded in the emulator's own form (emu_tmap.h) and copied synchronously. Kernel
 * timing is host wall time. Build with the sanitizers (tests/gpu/emu/run.sh) to have kernel memory errors
 * reported by ASan/UBSan. CNN_EMU_FAIL_CALL=n fails the n-th API call (fault injection, below). Test
 * infrastructure only.
 */
#include <cuda.h>

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#include <map>
#include <string>
#include <vector>

#include "emu.h"

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
extern "C" void __sanitizer_start_switch_fiber(void **fake_stack_save, const void *bottom, size_t size);
extern "C" void __sanitizer_finish_switch_fiber(void *fake_stack_save, const void **bottom_old, size_t *size_old);
extern "C" void __asan_unpoison_memory_region(void const volatile *addr, size_t size);
#else
#define EMU_ASAN 0
#endif

/* ---- state ------------------------------------------------------------------------------------------- */

static size_t mem_budget, mem_used;
static std::map<CUdeviceptr, size_t> allocs;
static CUresult sticky = CUDA_SUCCESS;
static int sm_count = 2;

struct kfunc {
    void (*call)(const void *);
    size_t (*size)(void);
    std::string name;
};

struct op {
    int kind; /* 0 launch, 1 copy, 2 memset */
    kfunc *f;
    unsigned g[3], b[3];
    unsigned smem; /* dynamic shared memory the launch passed (the kernels may check it: dynamic_smem_bytes) */
    std::vector<unsigned char> args;
    CUdeviceptr dst, src;
    size_t bytes;
    unsigned char value;
    bool coop; /* a cooperative launch (CU_LAUNCH_ATTRIBUTE_COOPERATIVE): its blocks meet at grid barriers */
};

struct graph {
    std::vector<op> ops;
};

static bool capturing;
static graph *recording;

static CUresult fail(CUresult r, const std::string &msg) {
    fprintf(stderr, "emu: %s\n", msg.c_str());
    if (r == CUDA_ERROR_LAUNCH_FAILED || r == CUDA_ERROR_ILLEGAL_ADDRESS) sticky = r;
    return r;
}

/* ---- the fiber scheduler ------------------------------------------------------------------------------ */

enum { F_RUN, F_BAR, F_WARP, F_GATHER, F_DONE, F_YIELD, F_GRID };
#define SLOT 64
#define STACK (512 * 1024)

/* A fiber's saved context. glibc's swapcontext makes a sigprocmask system call at every switch, and a launch
 * switches at every barrier and shuffle of every thread (perf-log step 124: most of the emulator's time), so on
 * x86-64 a switch is ctx_swap below: the callee-saved registers, MXCSR and the x87 control word pushed on the old
 * stack, the stack pointers exchanged. Elsewhere, ucontext. */
#if defined(__x86_64__)
typedef void *fiber_ctx; /* the fiber's stack pointer while it is switched out */
/* ctx_swap(save, next): saves the running context on its stack and its stack pointer in *save, then resumes the
 * context whose stack pointer is next */
extern "C" void emu_ctx_swap(void **save, void *next);
asm(".text\n"
    ".globl emu_ctx_swap\n"
    ".hidden emu_ctx_swap\n"
    ".type emu_ctx_swap,@function\n"
    "emu_ctx_swap:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  subq $8, %rsp\n  stmxcsr (%rsp)\n  fnstcw 4(%rsp)\n"
    "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
    "  ldmxcsr (%rsp)\n  fldcw 4(%rsp)\n  addq $8, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size emu_ctx_swap, .-emu_ctx_swap\n");
static void ctx_swap(fiber_ctx *save, fiber_ctx *next) { emu_ctx_swap(save, *next); }
/* a context that starts fn on the stack [stack, stack + size): the frame ctx_swap pops (the caller's MXCSR and
 * control word, zero registers) under fn's address, and under that a null return address, so that fn starts with
 * the stack aligned as after a call; fn must never return */
static void ctx_make(fiber_ctx *c, char *stack, size_t size, void (*fn)(void)) {
#if EMU_ASAN
    /* the frames of the fiber that ran here last keep their redzones (ASan clears a stack in swapcontext only) */
    __asan_unpoison_memory_region(stack, size);
#endif
    unsigned mxcsr;
    unsigned short fpcw;
    asm volatile("stmxcsr %0" : "=m"(mxcsr));
    asm volatile("fnstcw %0" : "=m"(fpcw));
    void **sp = (void **)(((uintptr_t)stack + size) & ~(uintptr_t)15);
    *--sp = NULL;
    *--sp = (void *)fn;
    for (int r = 0; r < 6; r++) *--sp = NULL;
    *--sp = NULL;
    memcpy(sp, &mxcsr, 4);
    memcpy((char *)sp + 4, &fpcw, 2);
    *c = sp;
}
#else
typedef ucontext_t fiber_ctx;
static void ctx_swap(fiber_ctx *save, fiber_ctx *next) { swapcontext(save, next); }
static void ctx_make(fiber_ctx *c, char *stack, size_t size, void (*fn)(void)) {
    getcontext(c);
    c->uc_stack.ss_sp = stack;
    c->uc_stack.ss_size = size;
    c->uc_link = NULL;
    makecontext(c, fn, 0);
}
#endif

static emu_rt rt;
static fiber_ctx sched;
static std::vector<fiber_ctx> fctx;
static std::vector<char *> stacks;
static std::vector<int> fstate, fmask, fbytes; /* fbytes: the payload of each thread's pending shuffle or gather */
static std::vector<std::vector<unsigned char>> slot, result;
static std::vector<void *> gather_out; /* a fiber's pending gather's destination (a cooperative grid's fibers too) */
static int cur;
static void (*cur_fn)(const void *);
static const void *cur_args;
#if EMU_ASAN
static void *sched_fake_stack;
#endif

static void to_fiber(int t) {
    cur = t;
#if EMU_ASAN
    __sanitizer_start_switch_fiber(&sched_fake_stack, stacks[t], STACK);
#endif
    ctx_swap(&sched, &fctx[t]);
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(sched_fake_stack, NULL, NULL);
#endif
}

static void to_scheduler(bool finished) {
    /* a finished fiber's context is saved too, and never resumed: make_fibers makes it afresh */
#if EMU_ASAN
    void *fake = NULL;
    __sanitizer_start_switch_fiber(finished ? NULL : &fake, NULL, 0);
    ctx_swap(&fctx[cur], &sched);
    __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#else
    (void)finished;
    ctx_swap(&fctx[cur], &sched);
#endif
}

static void fiber_main(void) {
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(NULL, NULL, NULL);
#endif
    cur_fn(cur_args);
    fstate[cur] = F_DONE;
    to_scheduler(true);
}

static void emu_sync(void) {
    fstate[cur] = F_BAR;
    to_scheduler(false);
}

static void emu_yield(void) {
    fstate[cur] = F_YIELD;
    to_scheduler(false);
}

/* a cooperative kernel's grid-wide barrier (kernels/common.cuh, grid_sync): the thread parks until every thread of
 * the grid is there (exec_launch runs the other blocks meanwhile) */
static void emu_grid_sync(void) {
    fstate[cur] = F_GRID;
    to_scheduler(false);
}

static void emu_allgather(const void *in, void *out, int bytes) {
    fbytes[cur] = bytes;
    memcpy(slot[cur].data(), in, (size_t)bytes);
    gather_out[cur] = out;
    fstate[cur] = F_GATHER;
    to_scheduler(false);
}

static void emu_shfl(const void *in, void *out, int bytes, int mask) {
    fbytes[cur] = bytes;
    memcpy(slot[cur].data(), in, (size_t)bytes);
    fmask[cur] = mask;
    fstate[cur] = F_WARP;
    to_scheduler(false);
    memcpy(out, result[cur].data(), (size_t)bytes);
}

/* fibers for threads [base, base + n) of the launch, each starting at the kernel */
static void make_fibers(int base, int n) {
    const size_t total = (size_t)base + (size_t)n;
    if (fctx.size() < total) {
        fctx.resize(total);
        fstate.resize(total);
        fmask.resize(total);
        fbytes.resize(total);
        gather_out.resize(total);
        slot.resize(total, std::vector<unsigned char>(SLOT));
        result.resize(total, std::vector<unsigned char>(SLOT));
        while (stacks.size() < total) stacks.push_back((char *)malloc(STACK));
    }
    for (size_t t = (size_t)base; t < total; t++) {
        ctx_make(&fctx[t], stacks[t], STACK, fiber_main);
        fstate[t] = F_RUN;
    }
}

enum { BLOCK_DONE, BLOCK_AT_GRID, BLOCK_FAILED };

/* run one block, whose threads are fibers base .. base + n - 1, until every thread has exited (BLOCK_DONE) or waits
 * at the grid barrier (BLOCK_AT_GRID: a cooperative launch resumes it once every block is there); BLOCK_FAILED on
 * divergence or deadlock */
static int run_block(kfunc *f, const unsigned g[3], const unsigned b[3], unsigned bx, unsigned by, unsigned bz,
                     int base) {
    const int n = (int)(b[0] * b[1] * b[2]);
    int *st = &fstate[(size_t)base];
    rt.bid = {bx, by, bz};
    rt.bdim = {b[0], b[1], b[2]};
    rt.gdim = {g[0], g[1], g[2]};
    for (;;) {
        /* threads that yielded (spinning on an mbarrier) run again; the round made progress if a barrier was
         * arrived at or some thread did anything but spin (it was released, or it stopped somewhere else) */
        unsigned long long events0 = rt.events;
        bool fresh = false;
        for (int t = 0; t < n; t++) {
            const bool retry = st[t] == F_YIELD;
            if (retry) st[t] = F_RUN;
            if (st[t] != F_RUN) continue;
            rt.tid = {(unsigned)t % b[0], (unsigned)t / b[0] % b[1], (unsigned)t / (b[0] * b[1])};
            to_fiber(base + t);
            fresh = fresh || !retry || st[t] != F_YIELD;
        }
        int done = 0, bar = 0, warp = 0, spin = 0, grid = 0;
        for (int t = 0; t < n; t++) {
            done += st[t] == F_DONE;
            bar += st[t] == F_BAR;
            warp += st[t] == F_WARP || st[t] == F_GATHER;
            spin += st[t] == F_YIELD;
            grid += st[t] == F_GRID;
        }
        if (done == n) return BLOCK_DONE;
        if (grid > 0 && grid + done == n) {
            if (done == 0) return BLOCK_AT_GRID;
            char where[128];
            snprintf(where, sizeof where, "block (%u,%u,%u): %d of %d threads exited while the others wait at the grid barrier",
                     bx, by, bz, done, n);
            fail(CUDA_ERROR_LAUNCH_FAILED, "kernel " + f->name + " barrier divergence in " + where);
            return BLOCK_FAILED;
        }
        bool progress = false;
        for (int w = 0; w * 32 < n; w++) {
            int lo = w * 32, hi = lo + 32 < n ? lo + 32 : n, waiting = 0, gathering = 0, live = 0;
            for (int t = lo; t < hi; t++) {
                live += st[t] != F_DONE;
                waiting += st[t] == F_WARP;
                gathering += st[t] == F_GATHER;
            }
            /* every lane of a warp's collective gives the same payload size (warps run theirs interleaved, each
             * with its own sizes) */
            bool sizes_differ = false;
            for (int t = lo; t < hi; t++) sizes_differ |= fbytes[(size_t)(base + t)] != fbytes[(size_t)(base + lo)];
            if ((gathering > 0 && gathering == live) || (waiting > 0 && waiting == live)) {
                if (sizes_differ && live == hi - lo) {
                    char where[96];
                    snprintf(where, sizeof where, "block (%u,%u,%u) warp %d", bx, by, bz, w);
                    fail(CUDA_ERROR_LAUNCH_FAILED, "kernel " + f->name + " " + where + ": lanes in collectives of different sizes");
                    return BLOCK_FAILED;
                }
            }
            const size_t slot_bytes = (size_t)fbytes[(size_t)(base + lo)];
            if (gathering > 0 && gathering == live && live == hi - lo) {
                for (int t = lo; t < hi; t++) {
                    unsigned char *out = (unsigned char *)gather_out[base + t];
                    for (int l = lo; l < hi; l++)
                        memcpy(out + (size_t)(l - lo) * slot_bytes, slot[(size_t)(base + l)].data(), slot_bytes);
                    st[t] = F_RUN;
                }
                progress = true;
                continue;
            }
            if (waiting == 0 || waiting != live) continue;
            if (live != hi - lo) {
                char where[96];
                snprintf(where, sizeof where, "block (%u,%u,%u) warp %d", bx, by, bz, w);
                fail(CUDA_ERROR_LAUNCH_FAILED, "kernel " + f->name + " " + where + ": a warp shuffle with exited lanes");
                return BLOCK_FAILED;
            }
            for (int t = lo; t < hi; t++) {
                int src = lo + ((t - lo) ^ fmask[(size_t)(base + t)]);
                if (src >= hi) src = t;
                memcpy(result[(size_t)(base + t)].data(), slot[(size_t)(base + src)].data(), slot_bytes);
            }
            for (int t = lo; t < hi; t++) st[t] = F_RUN;
            progress = true;
        }
        if (progress) continue;
        if (spin > 0) {
            if (fresh || rt.events != events0) continue;
            char where[160];
            snprintf(where, sizeof where, "block (%u,%u,%u): %d waiting on mbarriers nobody will arrive at, %d at __syncthreads, %d at a shuffle, %d done",
                     bx, by, bz, spin, bar, warp, done);
            fail(CUDA_ERROR_LAUNCH_FAILED, "kernel " + f->name + " deadlock in " + where);
            return BLOCK_FAILED;
        }
        if (bar > 0 && bar + done == n) {
            if (done > 0) {
                char where[128];
                snprintf(where, sizeof where, "block (%u,%u,%u): %d of %d threads exited while the others wait at __syncthreads",
                         bx, by, bz, done, n);
                fail(CUDA_ERROR_LAUNCH_FAILED, "kernel " + f->name + " barrier divergence in " + where);
                return BLOCK_FAILED;
            }
            for (int t = 0; t < n; t++) st[t] = F_RUN;
            continue;
        }
        char where[160];
        snprintf(where, sizeof where, "block (%u,%u,%u): %d at __syncthreads, %d at a shuffle, %d at the grid barrier, %d done",
                 bx, by, bz, bar, warp, grid, done);
        fail(CUDA_ERROR_LAUNCH_FAILED, "kernel " + f->name + " deadlock in " + where);
        return BLOCK_FAILED;
    }
}

/* A plain launch runs its blocks one after another. A cooperative one keeps every block's fibers: the blocks run in
 * turn up to the grid barrier (grid_sync), then all of them on from it, and so on. Within a phase one block runs at a
 * time, so a kernel's static shared memory (emu.h: one copy) must not carry values across a grid barrier; the
 * kernels keep that rule (kernels/batchnorm.cu). */
static CUresult exec_launch(kfunc *f, const unsigned g[3], const unsigned b[3], const void *args, bool coop) {
    if (sticky) return sticky;
    cur_fn = f->call;
    cur_args = args;
    const int n = (int)(b[0] * b[1] * b[2]);
    if (!coop) {
        for (unsigned z = 0; z < g[2]; z++)
            for (unsigned y = 0; y < g[1]; y++)
                for (unsigned x = 0; x < g[0]; x++) {
                    make_fibers(0, n);
                    int r = run_block(f, g, b, x, y, z, 0);
                    if (r == BLOCK_AT_GRID)
                        return fail(CUDA_ERROR_LAUNCH_FAILED, "kernel " + f->name + ": a grid barrier in a launch that is not cooperative");
                    if (r != BLOCK_DONE) return sticky;
                }
        return CUDA_SUCCESS;
    }
    const int blocks = (int)(g[0] * g[1] * g[2]);
    make_fibers(0, blocks * n);
    std::vector<int> state((size_t)blocks, BLOCK_AT_GRID);
    for (;;) {
        int done = 0;
        for (int k = 0; k < blocks; k++) {
            if (state[(size_t)k] == BLOCK_DONE) {
                done++;
                continue;
            }
            for (int t = 0; t < n; t++)
                if (fstate[(size_t)(k * n + t)] == F_GRID) fstate[(size_t)(k * n + t)] = F_RUN;
            const unsigned x = (unsigned)k % g[0], y = (unsigned)k / g[0] % g[1], z = (unsigned)k / (g[0] * g[1]);
            state[(size_t)k] = run_block(f, g, b, x, y, z, k * n);
            if (state[(size_t)k] == BLOCK_FAILED) return sticky;
            done += state[(size_t)k] == BLOCK_DONE;
        }
        if (done == blocks) return CUDA_SUCCESS;
        if (done > 0)
            return fail(CUDA_ERROR_LAUNCH_FAILED, "kernel " + f->name + ": " + std::to_string(done) + " of " +
                                                      std::to_string(blocks) + " blocks exited while the others wait at the grid barrier");
    }
}

static CUresult exec_op(const op &o) {
    if (o.kind == 0) {
        rt.dyn_smem = o.smem;
        return exec_launch(o.f, o.g, o.b, o.args.data(), o.coop);
    }
    if (o.kind == 1) memmove((void *)o.dst, (const void *)o.src, o.bytes);
    if (o.kind == 2) memset((void *)o.dst, o.value, o.bytes);
    return sticky;
}

/* ---- memory ------------------------------------------------------------------------------------------- */

static bool valid_range(CUdeviceptr p, size_t bytes) {
    auto it = allocs.upper_bound(p);
    if (it == allocs.begin()) return false;
    --it;
    return p >= it->first && p + bytes <= it->first + it->second;
}

static CUresult check_range(CUdeviceptr p, size_t bytes, const char *what) {
    if (bytes == 0 || valid_range(p, bytes)) return CUDA_SUCCESS;
    char b[96];
    snprintf(b, sizeof b, "%p + %zu bytes", (void *)p, bytes);
    return fail(CUDA_ERROR_INVALID_VALUE, std::string(what) + ": " + b + " is not inside one allocation");
}

#define EMU_LIB "cuda"
#define EMU_FAIL_ENV "CNN_EMU_FAIL_CALL"
#include "emu_fault.h"

/* ---- the API -------------------------------------------------------------------------------------------- */

extern "C" {

static CUresult e_Init(unsigned) {
    FAULT(CUDA_ERROR_UNKNOWN);
    const char *mb = getenv("CNN_EMU_MEM_MB");
    mem_budget = (size_t)(mb ? atol(mb) : 1024) << 20;
    const char *sm = getenv("CNN_EMU_SMS");
    if (sm) sm_count = atoi(sm);
    rt.sync = emu_sync;
    rt.shfl_xor = emu_shfl;
    rt.allgather = emu_allgather;
    rt.yield = emu_yield;
    rt.grid_sync = emu_grid_sync;
    return CUDA_SUCCESS;
}
static CUresult e_DriverGetVersion(int *v) { FAULT(CUDA_ERROR_UNKNOWN); *v = 13000; return CUDA_SUCCESS; }
static CUresult e_GetErrorName(CUresult r, const char **s) {
    switch (r) {
    case CUDA_SUCCESS: *s = "CUDA_SUCCESS"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *s = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    case CUDA_ERROR_INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; break;
    case CUDA_ERROR_LAUNCH_FAILED: *s = "CUDA_ERROR_LAUNCH_FAILED"; break;
    case CUDA_ERROR_INVALID_IMAGE: *s = "CUDA_ERROR_INVALID_IMAGE"; break;
    case CUDA_ERROR_NOT_FOUND: *s = "CUDA_ERROR_NOT_FOUND"; break;
    default: *s = "CUDA_ERROR_(emulated)"; break;
    }
    return CUDA_SUCCESS;
}
static CUresult e_GetErrorString(CUresult r, const char **s) {
    *s = r == CUDA_SUCCESS ? "no error" : "emulated error (see the emu: line on stderr)";
    return CUDA_SUCCESS;
}
static CUresult e_DeviceGetCount(int *n) { FAULT(CUDA_ERROR_UNKNOWN); *n = 1; return CUDA_SUCCESS; }
static CUresult e_DeviceGet(CUdevice *d, int i) {
    FAULT(CUDA_ERROR_UNKNOWN);
    if (i != 0) return CUDA_ERROR_INVALID_DEVICE;
    *d = 0;
    return CUDA_SUCCESS;
}
static CUresult e_DeviceGetName(char *name, int len, CUdevice) {
    FAULT(CUDA_ERROR_UNKNOWN);
    snprintf(name, (size_t)len, "cnn CPU emulator");
    return CUDA_SUCCESS;
}
static CUresult e_DeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice) {
    FAULT(CUDA_ERROR_UNKNOWN);
    *v = a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR ? 9
         : a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR ? 0
         : a == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT     ? sm_count
         : a == CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN ? 227 * 1024 /* H100 */
         : a == CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH       ? 1
         : a == CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE            ? 50 << 20 /* H100 */
                                                             : 0;
    return CUDA_SUCCESS;
}
static CUresult e_DeviceTotalMem(size_t *b, CUdevice) { FAULT(CUDA_ERROR_UNKNOWN); *b = mem_budget; return CUDA_SUCCESS; }
static int ctx_token;
static CUresult e_DevicePrimaryCtxRetain(CUcontext *c, CUdevice) { FAULT(CUDA_ERROR_UNKNOWN); *c = (CUcontext)&ctx_token; return CUDA_SUCCESS; }
static CUresult e_DevicePrimaryCtxRelease(CUdevice) { FAULT(CUDA_ERROR_UNKNOWN); return CUDA_SUCCESS; }
static CUcontext current;
static CUresult e_CtxSetCurrent(CUcontext c) { FAULT(CUDA_ERROR_UNKNOWN); current = c; return CUDA_SUCCESS; }
static CUresult e_CtxGetCurrent(CUcontext *c) { FAULT(CUDA_ERROR_UNKNOWN); *c = current; return CUDA_SUCCESS; }

static CUresult e_MemAlloc(CUdeviceptr *p, size_t bytes) {
    FAULT(CUDA_ERROR_OUT_OF_MEMORY);
    if (sticky) return sticky;
    if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
    if (bytes > mem_budget - mem_used) return CUDA_ERROR_OUT_OF_MEMORY;
    size_t rounded = (bytes + 255) & ~(size_t)255;
    void *h = aligned_alloc(256, rounded);
    if (!h) return CUDA_ERROR_OUT_OF_MEMORY;
    memset(h, 0xFF, rounded);
    *p = (CUdeviceptr)h;
    allocs[*p] = bytes; /* the usable size: a kernel touching the rounding slack is caught by ASan */
    mem_used += bytes;
    return CUDA_SUCCESS;
}
static CUresult e_MemFree(CUdeviceptr p) {
    FAULT(CUDA_ERROR_UNKNOWN);
    auto it = allocs.find(p);
    if (it == allocs.end()) return fail(CUDA_ERROR_INVALID_VALUE, "cuMemFree of a pointer cuMemAlloc did not return");
    mem_used -= it->second;
    allocs.erase(it);
    free((void *)p);
    return CUDA_SUCCESS;
}
static CUresult e_MemGetInfo(size_t *fr, size_t *tot) {
    FAULT(CUDA_ERROR_UNKNOWN);
    *fr = mem_budget - mem_used;
    *tot = mem_budget;
    return CUDA_SUCCESS;
}
static CUresult e_MemcpyHtoDAsync(CUdeviceptr d, const void *s, size_t n, CUstream) {
    FAULT(CUDA_ERROR_UNKNOWN);
    if (sticky) return sticky;
    if (capturing) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    CUresult r = check_range(d, n, "cuMemcpyHtoDAsync destination");
    if (r) return r;
    memcpy((void *)d, s, n);
    return CUDA_SUCCESS;
}
static CUresult e_MemcpyDtoHAsync(void *d, CUdeviceptr s, size_t n, CUstream) {
    FAULT(CUDA_ERROR_UNKNOWN);
    if (sticky) return sticky;
    if (capturing) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    CUresult r = check_range(s, n, "cuMemcpyDtoHAsync source");
    if (r) return r;
    memcpy(d, (const void *)s, n);
    return CUDA_SUCCESS;
}
static CUresult e_MemcpyDtoDAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream) {
    FAULT(CUDA_ERROR_UNKNOWN);
    if (sticky) return sticky;
    CUresult r = check_range(d, n, "cuMemcpyDtoDAsync destination");
    if (!r) r = check_range(s, n, "cuMemcpyDtoDAsync source");
    if (r) return r;
    op o{};
    o.kind = 1, o.dst = d, o.src = s, o.bytes = n;
    if (capturing) {
        recording->ops.push_back(o);
        return CUDA_SUCCESS;
    }
    return exec_op(o);
}
static CUresult e_MemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream) {
    FAULT(CUDA_ERROR_UNKNOWN);
    if (sticky) return sticky;
    CUresult r = check_range(d, n, "cuMemsetD8Async");
    if (r) return r;
    op o{};
    o.kind = 2, o.dst = d, o.bytes = n, o.value = v;
    if (capturing) {
        recording->ops.push_back(o);
        return CUDA_SUCCESS;
    }
    return exec_op(o);
}
static int stream_token;
static CUresult e_StreamCreate(CUstream *s, unsigned) { FAULT(CUDA_ERROR_UNKNOWN); *s = (CUstream)&stream_token; return CUDA_SUCCESS; }
static CUresult e_StreamDestroy(CUstream) { FAULT(CUDA_ERROR_UNKNOWN); return CUDA_SUCCESS; }
static CUresult e_StreamSynchronize(CUstream) {
    FAULT(CUDA_ERROR_UNKNOWN);
    if (capturing) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    return sticky;
}
static CUresult e_EventCreate(CUevent *e, unsigned) { FAULT(CUDA_ERROR_UNKNOWN); *e = (CUevent) new double(0); return CUDA_SUCCESS; }
static CUresult e_EventDestroy(CUevent e) { FAULT(CUDA_ERROR_UNKNOWN); delete (double *)e; return CUDA_SUCCESS; }
static CUresult e_EventRecord(CUevent e, CUstream) {
    FAULT(CUDA_ERROR_UNKNOWN);
    if (capturing) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    *(double *)e = ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
    return sticky;
}
static CUresult e_EventSynchronize(CUevent) { FAULT(CUDA_ERROR_UNKNOWN); return sticky; }
/* one stream, executed in order: a wait on an event is already satisfied */
static CUresult e_StreamWaitEvent(CUstream, CUevent, unsigned) { FAULT(CUDA_ERROR_UNKNOWN); return sticky; }
static CUresult e_EventElapsedTime(float *ms, CUevent a, CUevent b) {
    FAULT(CUDA_ERROR_UNKNOWN);
    *ms = (float)(*(double *)b - *(double *)a);
    if (*ms <= 0) *ms = 1e-3f;
    return sticky;
}

struct module {
    void *lib;
    std::map<std::string, kfunc *> fns;
};
static CUresult e_ModuleLoadData(CUmodule *m, const void *image) {
    FAULT(CUDA_ERROR_UNKNOWN);
    const char *img = (const char *)image;
    if (strncmp(img, "CNNEMU1\n", 8) != 0) return fail(CUDA_ERROR_INVALID_IMAGE, "cuModuleLoadData: not an emulator image");
    void *lib = dlopen(img + 8, RTLD_NOW | RTLD_LOCAL);
    if (!lib) return fail(CUDA_ERROR_INVALID_IMAGE, std::string("cuModuleLoadData: ") + dlerror());
    void (*set_rt)(emu_rt *) = (void (*)(emu_rt *))dlsym(lib, "emu_set_rt");
    if (!set_rt) return fail(CUDA_ERROR_INVALID_IMAGE, std::string("cuModuleLoadData: no emu_set_rt in ") + (img + 8));
    set_rt(&rt);
    module *mod = new module;
    mod->lib = lib;
    *m = (CUmodule)mod;
    return CUDA_SUCCESS;
}
static CUresult e_ModuleUnload(CUmodule m) {
    FAULT(CUDA_ERROR_UNKNOWN);
    module *mod = (module *)m;
    for (auto &kv : mod->fns) delete kv.second;
    /* the library stays loaded: recorded graphs may still point into it */
    delete mod;
    return CUDA_SUCCESS;
}
static CUresult e_ModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
    FAULT(CUDA_ERROR_UNKNOWN);
    module *mod = (module *)m;
    std::string call = std::string("emu_call_") + name, size = std::string("emu_size_") + name;
    kfunc *k = new kfunc;
    k->call = (void (*)(const void *))dlsym(mod->lib, call.c_str());
    k->size = (size_t(*)(void))dlsym(mod->lib, size.c_str());
    k->name = name;
    if (!k->call || !k->size) {
        delete k;
        return fail(CUDA_ERROR_NOT_FOUND, std::string("cuModuleGetFunction: no kernel ") + name);
    }
    mod->fns[name] = k;
    *f = (CUfunction)k;
    return CUDA_SUCCESS;
}
static CUresult e_FuncGetAttribute(int *v, CUfunction_attribute, CUfunction) { FAULT(CUDA_ERROR_UNKNOWN); *v = 0; return CUDA_SUCCESS; }
/* dynamic shared memory: the kernels declare a static array of the same size when compiled for the emulator */
static CUresult e_FuncSetAttribute(CUfunction, CUfunction_attribute a, int) {
    FAULT(CUDA_ERROR_UNKNOWN);
    if (a != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) return fail(CUDA_ERROR_NOT_SUPPORTED, "cuFuncSetAttribute: attribute");
    return CUDA_SUCCESS;
}
/* one block per SM: a persistent grid then has sm_count CTAs (tests cap it lower to give each several tiles) */
static CUresult e_OccupancyMaxActiveBlocksPerMultiprocessor(int *n, CUfunction, int, size_t) {
    FAULT(CUDA_ERROR_UNKNOWN);
    *n = 1;
    return CUDA_SUCCESS;
}
static CUresult launch(CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                       unsigned smem, void **params, void **extra, bool coop) {
    if (sticky) return sticky;
    kfunc *f = (kfunc *)fn;
    if (!params || extra || smem > 227 * 1024) return fail(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel " + f->name + ": unexpected launch form");
    if (gx == 0 || gy == 0 || gz == 0 || gy > 65535 || gz > 65535 || bx * by * bz > 1024 || bx * by * bz == 0)
        return fail(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel " + f->name + ": bad grid or block");
    op o{};
    o.kind = 0;
    o.f = f;
    o.g[0] = gx, o.g[1] = gy, o.g[2] = gz, o.b[0] = bx, o.b[1] = by, o.b[2] = bz;
    o.smem = smem;
    o.coop = coop;
    /* a cooperative grid must fit the GPU at once: one block per SM here (e_OccupancyMaxActiveBlocksPerMultiprocessor) */
    if (coop && (unsigned long long)gx * gy * gz > (unsigned long long)sm_count)
        return fail(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "cooperative launch of " + f->name + ": more blocks than fit at once");
    size_t n = f->size();
    o.args.assign((const unsigned char *)params[0], (const unsigned char *)params[0] + n);
    if (capturing) {
        recording->ops.push_back(o);
        return CUDA_SUCCESS;
    }
    return exec_op(o);
}
static CUresult e_LaunchKernel(CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                               unsigned smem, CUstream, void **params, void **extra) {
    FAULT(CUDA_ERROR_UNKNOWN);
    return launch(fn, gx, gy, gz, bx, by, bz, smem, params, extra, false);
}
/* the launch with attributes: programmatic stream serialization, which changes nothing here (launches run one
 * after another), and cooperative launches; no clusters */
static CUresult e_LaunchKernelEx(const CUlaunchConfig *c, CUfunction fn, void **params, void **extra) {
    FAULT(CUDA_ERROR_UNKNOWN);
    if (sticky) return sticky;
    if (!c) return fail(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernelEx: no launch config");
    bool coop = false;
    for (unsigned i = 0; i < c->numAttrs; i++) {
        const CUlaunchAttribute &at = c->attrs[i];
        if (at.id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && at.value.cooperative <= 1)
            coop = at.value.cooperative == 1;
        else if (at.id != CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION ||
                 at.value.programmaticStreamSerializationAllowed > 1)
            return fail(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernelEx " + ((kfunc *)fn)->name + ": unexpected attribute");
    }
    return launch(fn, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ,
                  c->sharedMemBytes, params, extra, coop);
}
static CUresult e_StreamBeginCapture(CUstream, CUstreamCaptureMode) {
    FAULT(CUDA_ERROR_UNKNOWN);
    if (capturing) return CUDA_ERROR_ILLEGAL_STATE;
    capturing = true;
    recording = new graph;
    return CUDA_SUCCESS;
}
static CUresult e_StreamEndCapture(CUstream, CUgraph *g) {
    FAULT(CUDA_ERROR_UNKNOWN);
    if (!capturing) return CUDA_ERROR_ILLEGAL_STATE;
    capturing = false;
    *g = (CUgraph)recording;
    recording = NULL;
    return CUDA_SUCCESS;
}
static CUresult e_StreamIsCapturing(CUstream, CUstreamCaptureStatus *s) {
    FAULT(CUDA_ERROR_UNKNOWN);
    *s = capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}
static CUresult e_GraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long) {
    FAULT(CUDA_ERROR_UNKNOWN);
    *e = (CUgraphExec) new graph(*(graph *)g);
    return CUDA_SUCCESS;
}
static CUresult e_GraphLaunch(CUgraphExec e, CUstream) {
    FAULT(CUDA_ERROR_UNKNOWN);
    if (capturing) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    for (const op &o : ((graph *)e)->ops) {
        CUresult r = exec_op(o);
        if (r) return r;
    }
    return CUDA_SUCCESS;
}
static CUresult e_GraphExecDestroy(CUgraphExec e) { FAULT(CUDA_ERROR_UNKNOWN); delete (graph *)e; return CUDA_SUCCESS; }
static CUresult e_GraphDestroy(CUgraph g) { FAULT(CUDA_ERROR_UNKNOWN); delete (graph *)g; return CUDA_SUCCESS; }

/* Tensor maps (emu_tmap.h): the driver's documented limits are checked, as the driver checks them, so a launcher
 * that asks for a map the GPU would refuse fails here too. Only what the engine asks for is supported. */
static CUresult tmap_common(emu_tensor_map *m, CUtensorMapDataType dt, cuuint32_t rank, void *addr, const cuuint64_t *dim,
                            const cuuint64_t *stride, const cuuint32_t *estride, CUtensorMapInterleave il,
                            CUtensorMapSwizzle sw, CUtensorMapFloatOOBfill oob) {
    memset(m, 0, sizeof *m);
    const int elem = dt == CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 || dt == CU_TENSOR_MAP_DATA_TYPE_FLOAT16 ? 2
                     : dt == CU_TENSOR_MAP_DATA_TYPE_FLOAT32                                          ? 4
                                                                                                      : 0;
    if (!elem || rank < 2 || rank > 4 || !addr || ((uintptr_t)addr & 15) || il != CU_TENSOR_MAP_INTERLEAVE_NONE ||
        (sw != CU_TENSOR_MAP_SWIZZLE_NONE && sw != CU_TENSOR_MAP_SWIZZLE_128B) || oob != CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
        return fail(CUDA_ERROR_INVALID_VALUE, "cuTensorMapEncode: unsupported type, rank, address, interleave, swizzle or fill");
    m->elem = (uint8_t)elem, m->rank = (uint8_t)rank, m->swizzle128 = sw == CU_TENSOR_MAP_SWIZZLE_128B;
    m->base = (const unsigned char *)addr;
    for (cuuint32_t i = 0; i < rank; i++) {
        if (dim[i] == 0 || dim[i] > (1ull << 32) || estride[i] == 0 || estride[i] > 8)
            return fail(CUDA_ERROR_INVALID_VALUE, "cuTensorMapEncode: a dimension or traversal stride out of range");
        m->dim[i] = (uint32_t)dim[i], m->estride[i] = estride[i];
        if (i + 1 < rank) {
            if (stride[i] % 16 || stride[i] >= (1ull << 40))
                return fail(CUDA_ERROR_INVALID_VALUE, "cuTensorMapEncode: a global stride not a multiple of 16 below 2^40");
            m->stride[i] = stride[i];
        }
    }
    return CUDA_SUCCESS;
}
static CUresult e_TensorMapEncodeTiled(CUtensorMap *tm, CUtensorMapDataType dt, cuuint32_t rank, void *addr,
                                       const cuuint64_t *dim, const cuuint64_t *stride, const cuuint32_t *box,
                                       const cuuint32_t *estride, CUtensorMapInterleave il, CUtensorMapSwizzle sw,
                                       CUtensorMapL2promotion, CUtensorMapFloatOOBfill oob) {
    FAULT(CUDA_ERROR_UNKNOWN);
    emu_tensor_map m;
    if (rank < 2 || rank > 4)
        return fail(CUDA_ERROR_INVALID_VALUE, "cuTensorMapEncodeTiled: the emulator models ranks 2 to 4 only");
    CUresult r = tmap_common(&m, dt, rank, addr, dim, stride, estride, il, sw, oob);
    if (r) return r;
    for (cuuint32_t i = 0; i < rank; i++) {
        if (box[i] == 0 || box[i] > 256 || estride[i] != 1)
            return fail(CUDA_ERROR_INVALID_VALUE, "cuTensorMapEncodeTiled: a box dimension outside 1..256 (or strided)");
        m.box[i] = box[i];
    }
    if ((box[0] * m.elem) % 16 || (m.swizzle128 && box[0] * m.elem != 128))
        return fail(CUDA_ERROR_INVALID_VALUE, "cuTensorMapEncodeTiled: inner box not 16-byte whole (128 bytes with the 128-byte swizzle)");
    m.kind = EMU_TMAP_TILED;
    memcpy(tm, &m, sizeof m);
    return CUDA_SUCCESS;
}
static CUresult e_TensorMapEncodeIm2col(CUtensorMap *tm, CUtensorMapDataType dt, cuuint32_t rank, void *addr,
                                        const cuuint64_t *dim, const cuuint64_t *stride, const int *lower,
                                        const int *upper, cuuint32_t cpp, cuuint32_t ppc, const cuuint32_t *estride,
                                        CUtensorMapInterleave il, CUtensorMapSwizzle sw, CUtensorMapL2promotion,
                                        CUtensorMapFloatOOBfill oob) {
    FAULT(CUDA_ERROR_UNKNOWN);
    emu_tensor_map m;
    if (rank != 4) return fail(CUDA_ERROR_INVALID_VALUE, "cuTensorMapEncodeIm2col: the emulator models rank 4 (NHWC) only");
    CUresult r = tmap_common(&m, dt, rank, addr, dim, stride, estride, il, sw, oob);
    if (r) return r;
    for (int i = 0; i < 2; i++) {
        if (lower[i] < -128 || lower[i] > 127 || upper[i] < -128 || upper[i] > 127)
            return fail(CUDA_ERROR_INVALID_VALUE, "cuTensorMapEncodeIm2col: a bounding-box corner outside [-128, 127] (rank 4)");
        m.lower[i] = lower[i], m.upper[i] = upper[i];
    }
    if (cpp == 0 || cpp > 256 || ppc == 0 || ppc > 1024 || (cpp * m.elem) % 16 || (m.swizzle128 && cpp * m.elem != 128))
        return fail(CUDA_ERROR_INVALID_VALUE, "cuTensorMapEncodeIm2col: channels per pixel or pixels per column out of range");
    if ((int64_t)dim[1] - 1 + upper[0] < lower[0] || (int64_t)dim[2] - 1 + upper[1] < lower[1])
        return fail(CUDA_ERROR_INVALID_VALUE, "cuTensorMapEncodeIm2col: an empty bounding box");
    m.cpp = (uint16_t)cpp, m.ppc = (uint16_t)ppc, m.kind = EMU_TMAP_IM2COL;
    memcpy(tm, &m, sizeof m);
    return CUDA_SUCCESS;
}

static const struct {
    const char *name;
    void *fn;
} table[] = {
#define E(n) {"cu" #n, (void *)e_##n}
    E(Init), E(DriverGetVersion), E(GetErrorName), E(GetErrorString), E(DeviceGetCount), E(DeviceGet),
    E(DeviceGetName), E(DeviceGetAttribute), E(DeviceTotalMem), E(DevicePrimaryCtxRetain), E(DevicePrimaryCtxRelease),
    E(CtxSetCurrent), E(CtxGetCurrent), E(MemAlloc), E(MemFree), E(MemGetInfo), E(MemcpyHtoDAsync), E(MemcpyDtoHAsync),
    E(MemcpyDtoDAsync), E(MemsetD8Async), E(StreamCreate), E(StreamDestroy), E(StreamSynchronize), E(EventCreate),
    E(EventDestroy), E(EventRecord), E(EventSynchronize), E(StreamWaitEvent), E(EventElapsedTime), E(ModuleLoadData), E(ModuleUnload),
    E(ModuleGetFunction), E(FuncGetAttribute), E(FuncSetAttribute), E(LaunchKernel), E(StreamBeginCapture), E(StreamEndCapture),
    E(StreamIsCapturing), E(GraphInstantiateWithFlags), E(GraphLaunch), E(GraphExecDestroy), E(GraphDestroy),
    E(OccupancyMaxActiveBlocksPerMultiprocessor), E(TensorMapEncodeTiled), E(TensorMapEncodeIm2col), E(LaunchKernelEx),
#undef E
};

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status) {
    FAULT(CUDA_ERROR_UNKNOWN);
    (void)version;
    (void)flags;
    for (const auto &t : table)
        if (strcmp(t.name, symbol) == 0) {
            *pfn = t.fn;
            if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
            return CUDA_SUCCESS;
        }
    *pfn = NULL;
    if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_SUCCESS;
}
}
