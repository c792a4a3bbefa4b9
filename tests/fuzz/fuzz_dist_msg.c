/* fuzz_dist_msg.c — the multi-GPU rendezvous message parser (dist.h, cnn_dist_msg_decode) on any bytes, as a peer
 * or a stray connection could send them: it never reads past len, a complete message re-encodes to the same
 * bytes, every prefix of it asks for more, and anything else is an error with a message. */
#include "cnn/dist.h"
#include "fuzz.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* a copy of exactly size bytes: ASan sees any read past the end */
    uint8_t *buf = malloc(size ? size : 1);
    REQUIRE(buf);
    memcpy(buf, data, size);
    cnn_dist_msg m;
    int r = cnn_dist_msg_decode(buf, size, &m);
    REQUIRE(r >= -1 && r <= (int)size && r <= CNN_DIST_MSG_MAX);
    if (r < 0) fuzz_check_status(CNN_E_FORMAT);
    if (r > 0) {
        REQUIRE(m.type >= CNN_DIST_MSG_HELLO && m.type <= CNN_DIST_MSG_FAIL);
        REQUIRE(m.rank >= 0 && m.rank < CNN_DIST_MAX_WORLD);
        uint8_t again[CNN_DIST_MSG_MAX];
        REQUIRE(cnn_dist_msg_encode(&m, again) == (size_t)r && memcmp(again, buf, (size_t)r) == 0);
        cnn_dist_msg p;
        for (int k = 0; k < r; k++) REQUIRE(cnn_dist_msg_decode(buf, (size_t)k, &p) == 0);
    }
    free(buf);
    return 0;
}
