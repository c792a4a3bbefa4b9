/* emu_nvrtc.cc -- a stand-in libnvrtc.so for the CPU emulator: "compiles" a kernel program by writing its source
 * and headers to a work directory and building it with the host C++ compiler (with emu.h forced in and the
 * program's -D options) into a shared object. The "CUBIN" it returns is the text "CNNEMU1\n<path of the .so>",
 * which the emulated driver (emu_cuda.cc) dlopens. Objects are keyed by a hash of everything they depend on, so
 * a rerun reuses them.
 *
 * Environment: CNN_EMU_WORK (work directory, default /tmp/cnn-emu-<uid>), CNN_EMU_CXX (default g++),
 * CNN_EMU_CXXFLAGS (extra flags, e.g. -fsanitize=address,undefined), CNN_EMU_NVRTC_FAIL_CALL / CNN_EMU_COUNT (fault
 * injection: as emu_cuda.cc's CNN_EMU_FAIL_CALL). EMU_DIR (compile time) holds emu.h.
 * Test infrastructure only. */
#include <nvrtc.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#ifndef EMU_DIR
#error "build with -DEMU_DIR=\"path of tests/gpu/emu\""
#endif

struct program {
    std::string src, name;
    std::vector<std::string> hdr, hdr_name;
    std::string log, image;
};

static unsigned long long fnv(unsigned long long h, const std::string &s) {
    for (unsigned char c : s) {
        h ^= c;
        h *= 0x100000001b3ULL;
    }
    return h;
}

static bool write_file(const std::string &path, const std::string &text) {
    FILE *f = fopen(path.c_str(), "wb");
    if (!f) return false;
    bool ok = fwrite(text.data(), 1, text.size(), f) == text.size();
    return fclose(f) == 0 && ok;
}

static std::string read_file(const std::string &path) {
    std::string s;
    FILE *f = fopen(path.c_str(), "rb");
    if (!f) return s;
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
    fclose(f);
    return s;
}

static int run(const std::string &cmd, std::string *out) {
    std::string full = cmd + " 2>&1";
    FILE *p = popen(full.c_str(), "r");
    if (!p) return -1;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out->append(buf, n);
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#define EMU_LIB "nvrtc"
#define EMU_FAIL_ENV "CNN_EMU_NVRTC_FAIL_CALL"
#include "emu_fault.h"

extern "C" {

const char *nvrtcGetErrorString(nvrtcResult r) {
    return r == NVRTC_SUCCESS ? "NVRTC_SUCCESS" : r == NVRTC_ERROR_COMPILATION ? "NVRTC_ERROR_COMPILATION" : "NVRTC_ERROR (emulated)";
}

nvrtcResult nvrtcVersion(int *major, int *minor) {
    FAULT(NVRTC_ERROR_INTERNAL_ERROR);
    *major = 99; /* never mistaken for a real NVRTC in cache descriptors */
    *minor = 0;
    return NVRTC_SUCCESS;
}

static const int archs[] = {75, 80, 86, 89, 90, 100, 120};

nvrtcResult nvrtcGetNumSupportedArchs(int *n) {
    FAULT(NVRTC_ERROR_INTERNAL_ERROR);
    *n = (int)(sizeof archs / sizeof archs[0]);
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetSupportedArchs(int *out) {
    FAULT(NVRTC_ERROR_INTERNAL_ERROR);
    memcpy(out, archs, sizeof archs);
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name, int nh, const char *const *headers,
                               const char *const *include_names) {
    FAULT(NVRTC_ERROR_INTERNAL_ERROR);
    program *p = new program;
    p->src = src;
    p->name = name ? name : "kernel.cu";
    for (int i = 0; i < nh; i++) {
        p->hdr.push_back(headers[i]);
        p->hdr_name.push_back(include_names[i]);
    }
    *prog = (nvrtcProgram)p;
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog) {
    FAULT(NVRTC_ERROR_INTERNAL_ERROR);
    delete (program *)*prog;
    *prog = NULL;
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int nopts, const char *const *opts) {
    FAULT(NVRTC_ERROR_INTERNAL_ERROR);
    program *p = (program *)prog;
    std::string defs;
    for (int i = 0; i < nopts; i++)
        if (strncmp(opts[i], "-D", 2) == 0) defs += std::string(" '") + opts[i] + "'";
    const char *cxx = getenv("CNN_EMU_CXX") ? getenv("CNN_EMU_CXX") : "g++";
    const char *extra = getenv("CNN_EMU_CXXFLAGS") ? getenv("CNN_EMU_CXXFLAGS") : "";
    std::string work = getenv("CNN_EMU_WORK") ? getenv("CNN_EMU_WORK") : "/tmp/cnn-emu-" + std::to_string(getuid());
    mkdir(work.c_str(), 0755);
    unsigned long long h = 0xcbf29ce484222325ULL;
    h = fnv(h, p->name);
    h = fnv(h, p->src);
    for (size_t i = 0; i < p->hdr.size(); i++) h = fnv(fnv(h, p->hdr_name[i]), p->hdr[i]);
    h = fnv(h, defs);
    h = fnv(h, cxx);
    h = fnv(h, extra);
    h = fnv(h, read_file(EMU_DIR "/emu.h"));
    h = fnv(h, read_file(EMU_DIR "/emu_tmap.h"));
    char key[32];
    snprintf(key, sizeof key, "%016llx", h);
    std::string dir = work + "/" + key, so = dir + "/kernels.so";
    struct stat st;
    if (stat(so.c_str(), &st) == 0) {
        p->image = "CNNEMU1\n" + so;
        return NVRTC_SUCCESS;
    }
    mkdir(dir.c_str(), 0755);
    /* the sources go to a directory of this process's own: runs side by side (make test's job pool) that build the
     * same program never read each other's half-written files; only the finished object is shared */
    std::string src = dir + "/src." + std::to_string(getpid());
    mkdir(src.c_str(), 0755);
    std::vector<std::string> written;
    bool ok = write_file(src + "/" + p->name, p->src);
    written.push_back(src + "/" + p->name);
    for (size_t i = 0; i < p->hdr.size(); i++) {
        ok = ok && write_file(src + "/" + p->hdr_name[i], p->hdr[i]);
        written.push_back(src + "/" + p->hdr_name[i]);
    }
    written.push_back(src + "/wrapper.cc");
    struct cleanup {
        std::vector<std::string> &files;
        std::string dir;
        ~cleanup() {
            for (const auto &f : files) unlink(f.c_str());
            rmdir(dir.c_str());
        }
    } clean{written, src};
    if (!ok) {
        p->log = "emu: cannot write sources to " + src;
        return NVRTC_ERROR_COMPILATION;
    }
    std::string base = std::string(cxx) + " -std=c++17 -x c++ -include " EMU_DIR "/emu.h -I" + src + defs;
    /* 1. preprocess to find the kernels actually defined under these options */
    std::string pre;
    if (run(base + " -E -P " + src + "/" + p->name, &pre) != 0) {
        p->log = pre;
        return NVRTC_ERROR_COMPILATION;
    }
    std::string wrapper = "#include \"" + p->name + "\"\nEMU_RUNTIME\n";
    const std::string mark = "[[gnu::used]]";
    for (size_t at = pre.find(mark); at != std::string::npos; at = pre.find(mark, at + 1)) {
        size_t i = at + mark.size();
        while (i < pre.size() && isspace((unsigned char)pre[i])) i++;
        if (pre.compare(i, 4, "void") != 0) continue;
        i += 4;
        while (i < pre.size() && isspace((unsigned char)pre[i])) i++;
        size_t b = i;
        while (i < pre.size() && (isalnum((unsigned char)pre[i]) || pre[i] == '_')) i++;
        if (i > b) wrapper += "EMU_EXPORT(" + pre.substr(b, i - b) + ")\n";
    }
    if (!write_file(src + "/wrapper.cc", wrapper)) {
        p->log = "emu: cannot write the wrapper";
        return NVRTC_ERROR_COMPILATION;
    }
    /* 2. build the shared object (to a temp name, then rename: concurrent runs are safe) */
    std::string tmp = so + ".tmp." + std::to_string(getpid());
    std::string out;
    int rc = run(base + " -O1 -g -fPIC -shared -Wall -Wno-unknown-pragmas -Wno-unused-function " + extra + " " + src +
                     "/wrapper.cc -o " + tmp,
                 &out);
    if (rc != 0 || rename(tmp.c_str(), so.c_str()) != 0) {
        p->log = out.empty() ? "emu: the host compiler failed" : out;
        unlink(tmp.c_str());
        return NVRTC_ERROR_COMPILATION;
    }
    p->log = out;
    p->image = "CNNEMU1\n" + so;
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *n) {
    FAULT(NVRTC_ERROR_INTERNAL_ERROR);
    *n = ((program *)prog)->log.size() + 1;
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char *log) {
    FAULT(NVRTC_ERROR_INTERNAL_ERROR);
    program *p = (program *)prog;
    memcpy(log, p->log.c_str(), p->log.size() + 1);
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t *n) {
    FAULT(NVRTC_ERROR_INTERNAL_ERROR);
    *n = ((program *)prog)->image.size() + 1;
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char *out) {
    FAULT(NVRTC_ERROR_INTERNAL_ERROR);
    program *p = (program *)prog;
    memcpy(out, p->image.c_str(), p->image.size() + 1);
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetPTXSize(nvrtcProgram prog, size_t *n) { FAULT(NVRTC_ERROR_INTERNAL_ERROR); return nvrtcGetCUBINSize(prog, n); }
nvrtcResult nvrtcGetPTX(nvrtcProgram prog, char *out) { FAULT(NVRTC_ERROR_INTERNAL_ERROR); return nvrtcGetCUBIN(prog, out); }
}
