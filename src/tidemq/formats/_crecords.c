/* tidemq.formats._crecords: the per-message loops of a uniform batch, compiled.

A producer batch of one layout (every entry the same size, the same property bytes but
for the UNIQ_KEY value) becomes commit-log records of one size, tiled from a template
(tidemq/formats/record/batch.py). What then varies per message is a handful of
fixed-offset fields; in Python each costs a numpy call per column or a call per message.
These functions do the same work in one call per batch; check_records checks the
stored records of a read in one call; inner_facts reads an inner batch's send,
send_fields a send header's numbers, link_index_entries, key_hashes,
str_key_hashes and record_key_hashes chain and hash the key index's entries on the
dispatch thread (word_count counts a KEYS text's keys for it),
queue_entries writes the consume-queue entries of a run of records there,
decode_plain_messages turns the plain records of a pull body into a consumer's messages,
dict_get_many and dict_set_many look many keys up in (and store them into) a large dict
with their cache misses overlapped,
lmq_entry_keys builds and sorts a dispatch round's LMQ entry keys, lmq_fanout_runs
groups its entries into one run per queue, lmq_offset_props
writes a fan-out batch's LMQ offsets into its properties, json_header
writes a remoting command's JSON header, trace_pub_run and unique_words write a
trace message's records and keys, offset_entries_json writes the committed offsets' JSON
a slice of keys at a time, lowest_offsets gathers retention's lowest committed
offset per queue a slice of keys at a time, and clear_vector_state clears the vector
registers' upper halves after a library's vector code.
Every one has a pure-Python twin in tidemq/formats/record/loops.py (inner_facts: in
tidemq/formats/record/inner_send.py; send_fields: tidemq/codec/headers.py;
link_index_entries: tidemq/store/index_links.py; key_hashes, str_key_hashes,
record_key_hashes and word_count: tidemq/store/index_keys.py; queue_entries: tidemq/store/consume_queue.py;
decode_plain_messages: tidemq/formats/record/messages.py; dict_get_many and dict_set_many:
tidemq/store/lookups.py; lmq_entry_keys: tidemq/store/lmq_keys.py; lmq_fanout_runs:
tidemq/store/lmq_fanout.py; lmq_offset_props:
tidemq/store/lmq_props.py; json_header:
tidemq/codec/header.py; trace_pub_run and unique_words: tidemq/codec/trace_text.py;
offset_entries_json: tidemq/broker/offset_json.py; lowest_offsets:
tidemq/broker/offset_lowest.py; clear_vector_state: a no-op in
tidemq/codec/compression.py),
the fallback when this module is not built, and the tests compare the two.

Byte positions, all big-endian: the names below are those of tidemq/formats/batch.py
(client batch entries, ENTRY_OFF_*) and tidemq/formats/record/layout.py (records with
IPv4 hosts, OFF_*), where the layouts are. loops.py checks on import that this module
writes at the layout's positions and refuses it otherwise.

The GIL is kept: the work is microseconds, and dropping it lets another thread hold the
event loop up for a switch interval.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>

#define ENTRY_OVERHEAD 22
#define ENTRY_OFF_TOTAL_SIZE 0
#define ENTRY_OFF_FLAG 12
#define ENTRY_OFF_BODY_LENGTH 16
#define ENTRY_OFF_BODY 20

#define OFF_BODY_CRC 8
#define OFF_FLAG 16
#define OFF_QUEUE_OFFSET 20
#define OFF_PHYSICAL_OFFSET 28
#define OFF_BODY 88
#define OFF_MAGIC 4
#define OFF_SYSFLAG 36
#define OFF_BORN_HOST 48
#define OFF_QUEUE_ID 12
#define OFF_BORN_TIMESTAMP 40
#define OFF_STORE_TIMESTAMP 56
#define OFF_STORE_HOST 64
#define OFF_RECONSUME_TIMES 72
#define OFF_PREPARED_TX_OFFSET 76
#define OFF_BODY_LENGTH 84
#define MIN_RECORD_SIZE 91
#define MAGIC_V1 ((int32_t)0xDAA320A7)
#define MAGIC_V2 ((int32_t)0xDAA320AB)
#define SYSFLAG_BORNHOST_V6 0x10
#define SYSFLAG_STOREHOST_V6 0x20

static void put_be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24); p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8); p[3] = (unsigned char)v;
}

static void put_be64(unsigned char *p, uint64_t v) {
    put_be32(p, (uint32_t)(v >> 32));
    put_be32(p + 4, (uint32_t)v);
}

static uint32_t crc32_body(uint32_t crc, const unsigned char *p, size_t len); /* below */

/* Whether n client entries of `size` bytes with `blen`-byte bodies, in in_len bytes, fit
   n records of `rec` bytes with their properties at props_at, in out_len bytes; else 0
   with a ValueError naming `fn`. */
static int entries_fit(const char *fn, Py_ssize_t n, Py_ssize_t size, Py_ssize_t blen,
                       Py_ssize_t rec, Py_ssize_t props_at, Py_ssize_t in_len,
                       Py_ssize_t out_len) {
    Py_ssize_t plen = size - (ENTRY_OVERHEAD + blen);
    if (n < 0 || blen < 0 || plen < 0 || rec < OFF_BODY + blen || props_at < OFF_BODY + blen
            || props_at + plen > rec || out_len < n * rec || in_len < n * size) {
        PyErr_Format(PyExc_ValueError,
                     "%s: %zd entries of %zd bytes (%zd-byte bodies) do not fit "
                     "%zd records of %zd bytes (properties at %zd) in %zd/%zd bytes",
                     fn, n, size, blen, n, rec, props_at, in_len, out_len);
        return 0;
    }
    return 1;
}

/* stamp_records(buf, head, data, n, size, blen, props_at, queue_id, born_ts,
                 queue_offset, phys_base, store_ts)

   n records of len(head) bytes in one pass (head: a template record with IPv4 hosts, as
   uniform_head makes it): record i is the template with client entry i's FLAG, BODY (and
   its masked CRC32, folded with PCLMULQDQ where the CPU has it, as the record checks
   compute it) and PROPERTIES (at props_at), QUEUEID, BORNTIMESTAMP, queue offset
   queue_offset + i, physical offset phys_base + i * rec and store_ts. The body and
   properties are written once, not over a copy of the template's. */
static PyObject *stamp_records(PyObject *self, PyObject *args) {
    Py_buffer out, head, in;
    Py_ssize_t n, size, blen, props_at;
    int queue_id;
    long long born_ts, qo, phys, ts;
    if (!PyArg_ParseTuple(args, "w*y*y*nnnniLLLL", &out, &head, &in, &n, &size, &blen,
                          &props_at, &queue_id, &born_ts, &qo, &phys, &ts))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t rec = head.len, pstart = ENTRY_OVERHEAD + blen, plen = size - pstart;
    if (!entries_fit("stamp_records", n, size, blen, rec, props_at, in.len, out.len))
        goto done;
    unsigned char *dst = (unsigned char *)out.buf;
    const unsigned char *h = (const unsigned char *)head.buf;
    const unsigned char *src = (const unsigned char *)in.buf;
    Py_ssize_t mid = OFF_BODY + blen, tail = props_at + plen;
    for (Py_ssize_t i = 0; i < n; i++, dst += rec, src += size) {
        memcpy(dst, h, OFF_BODY);
        memcpy(dst + OFF_BODY, src + ENTRY_OFF_BODY, (size_t)blen);
        memcpy(dst + mid, h + mid, (size_t)(props_at - mid));
        memcpy(dst + props_at, src + pstart, (size_t)plen);
        memcpy(dst + tail, h + tail, (size_t)(rec - tail));
        memcpy(dst + OFF_FLAG, src + ENTRY_OFF_FLAG, 4);
        uint32_t crc = crc32_body(0, src + ENTRY_OFF_BODY, (size_t)blen);
        put_be32(dst + OFF_BODY_CRC, crc & 0x7FFFFFFFu);
        put_be32(dst + OFF_QUEUE_ID, (uint32_t)queue_id);
        put_be64(dst + OFF_BORN_TIMESTAMP, (uint64_t)born_ts);
        put_be64(dst + OFF_QUEUE_OFFSET, (uint64_t)(qo + i));
        put_be64(dst + OFF_PHYSICAL_OFFSET, (uint64_t)(phys + (long long)i * rec));
        put_be64(dst + OFF_STORE_TIMESTAMP, (uint64_t)ts);
    }
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&out);
    PyBuffer_Release(&head);
    PyBuffer_Release(&in);
    return result;
}

/* patch_records(buf, n, rec, queue_offset, phys_base, store_ts, ts_at)

   Record i gets QUEUEOFFSET queue_offset + i, PHYSICALOFFSET phys_base + i * rec and
   STORETIMESTAMP store_ts (at ts_at). */
static PyObject *patch_records(PyObject *self, PyObject *args) {
    Py_buffer out;
    Py_ssize_t n, rec, ts_at;
    long long qo, phys, ts;
    if (!PyArg_ParseTuple(args, "w*nnLLLn", &out, &n, &rec, &qo, &phys, &ts, &ts_at))
        return NULL;
    if (n < 0 || rec < OFF_PHYSICAL_OFFSET + 8 || ts_at < 0 || ts_at + 8 > rec
            || out.len < n * rec) {
        PyErr_Format(PyExc_ValueError, "patch_records: %zd records of %zd bytes (store time "
                     "at %zd) do not fit %zd bytes", n, rec, ts_at, out.len);
        PyBuffer_Release(&out);
        return NULL;
    }
    unsigned char *p = (unsigned char *)out.buf;
    for (Py_ssize_t i = 0; i < n; i++, p += rec) {
        put_be64(p + OFF_QUEUE_OFFSET, (uint64_t)(qo + i));
        put_be64(p + OFF_PHYSICAL_OFFSET, (uint64_t)(phys + (long long)i * rec));
        put_be64(p + ts_at, (uint64_t)ts);
    }
    PyBuffer_Release(&out);
    Py_RETURN_NONE;
}

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Whether the len bytes at p are ASCII without the 0x01 and 0x02 separators. With SSE2
   (every x86-64), sixteen bytes a step, the last step overlapping the one before: a byte
   at or above 0x80, or equal to 0x01 or 0x02, sets a high bit of the running OR. Else
   eight bytes a step, each byte looked at alone only in a word that has one below 0x03
   (the "has a byte less than n" test of Anderson's Bit Twiddling Hacks, exact for
   n <= 128). */
static int key_value_ok(const unsigned char *p, Py_ssize_t len) {
#if defined(__SSE2__)
    if (len >= 16) {
        const __m128i one = _mm_set1_epi8(1), two = _mm_set1_epi8(2);
        __m128i bad = _mm_setzero_si128(), v;
        for (Py_ssize_t k = 0; k + 16 <= len; k += 16) {
            v = _mm_loadu_si128((const __m128i *)(p + k));
            bad = _mm_or_si128(bad, _mm_or_si128(v, _mm_or_si128(_mm_cmpeq_epi8(v, one),
                                                                  _mm_cmpeq_epi8(v, two))));
        }
        v = _mm_loadu_si128((const __m128i *)(p + len - 16));
        bad = _mm_or_si128(bad, _mm_or_si128(v, _mm_or_si128(_mm_cmpeq_epi8(v, one),
                                                              _mm_cmpeq_epi8(v, two))));
        return _mm_movemask_epi8(bad) == 0;
    }
#endif
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    Py_ssize_t k = 0;
    for (; k + 8 <= len; k += 8) {
        uint64_t w;
        memcpy(&w, p + k, 8);
        if (w & highs)
            return 0;
        if (((w - 3 * ones) & ~w & highs) == 0)
            continue;
        for (int j = 0; j < 8; j++)
            if (p[k + j] == 0x01 || p[k + j] == 0x02)
                return 0;
    }
    for (; k < len; k++)
        if (p[k] >= 0x80 || p[k] == 0x01 || p[k] == 0x02)
            return 0;
    return 1;
}

/* Whether the len bytes at a and b are equal: sixteen bytes a step with SSE2, else
   eight, the last step overlapping the one before; no library call for the few dozen
   bytes of an entry's property text. */
static inline int bytes_equal(const unsigned char *a, const unsigned char *b,
                              Py_ssize_t len) {
    if (len < 8) {
        unsigned d = 0;
        for (Py_ssize_t k = 0; k < len; k++)
            d |= (unsigned)(a[k] ^ b[k]);
        return d == 0;
    }
#if defined(__SSE2__)
    if (len >= 16) {
        __m128i diff = _mm_setzero_si128();
        for (Py_ssize_t k = 0; k + 16 <= len; k += 16)
            diff = _mm_or_si128(diff, _mm_xor_si128(
                _mm_loadu_si128((const __m128i *)(a + k)),
                _mm_loadu_si128((const __m128i *)(b + k))));
        diff = _mm_or_si128(diff, _mm_xor_si128(
            _mm_loadu_si128((const __m128i *)(a + len - 16)),
            _mm_loadu_si128((const __m128i *)(b + len - 16))));
        return _mm_movemask_epi8(_mm_cmpeq_epi8(diff, _mm_setzero_si128())) == 0xFFFF;
    }
#endif
    uint64_t x, y, diff = 0;
    for (Py_ssize_t k = 0; k + 8 <= len; k += 8) {
        memcpy(&x, a + k, 8);
        memcpy(&y, b + k, 8);
        diff |= x ^ y;
    }
    memcpy(&x, a + len - 8, 8);
    memcpy(&y, b + len - 8, 8);
    return (diff | (x ^ y)) == 0;
}

/* uniform_entries' test of n entries of size bytes at first, their properties at pstart
   (plen bytes), the UNIQ_KEY value at ustart:uend of them. */
static int entries_uniform(const unsigned char *first, Py_ssize_t n, Py_ssize_t size,
                           Py_ssize_t pstart, Py_ssize_t plen, Py_ssize_t ustart,
                           Py_ssize_t uend) {
    const unsigned char *e = first;
    int same = 1;
    for (Py_ssize_t i = 0; i < n && same; i++, e += size) {
        same = key_value_ok(e + pstart + ustart, uend - ustart);
        if (i == 0 || !same) continue;
        same = memcmp(e + ENTRY_OFF_TOTAL_SIZE, first + ENTRY_OFF_TOTAL_SIZE, 4) == 0
            && memcmp(e + ENTRY_OFF_BODY_LENGTH, first + ENTRY_OFF_BODY_LENGTH, 4) == 0
            && bytes_equal(e + pstart - 2, first + pstart - 2, ustart + 2)
            && bytes_equal(e + pstart + uend, first + pstart + uend, plen - uend);
    }
    return same;
}

/* uniform_entries(data, n, size, blen, ustart, uend) -> bool

   Whether every entry repeats the first one's TOTALSIZE, BODYLENGTH, PROPERTIESLENGTH and
   property bytes, except bytes ustart:uend of the properties (the UNIQ_KEY value), which
   must be ASCII without the 0x01 and 0x02 separators in every entry. */
static PyObject *uniform_entries(PyObject *self, PyObject *args) {
    Py_buffer in;
    Py_ssize_t n, size, blen, ustart, uend;
    if (!PyArg_ParseTuple(args, "y*nnnnn", &in, &n, &size, &blen, &ustart, &uend))
        return NULL;
    Py_ssize_t pstart = ENTRY_OVERHEAD + blen, plen = size - pstart;
    if (n < 1 || blen < 0 || plen < 0 || ustart < 0 || ustart > uend || uend > plen
            || in.len < n * size) {
        PyErr_Format(PyExc_ValueError, "uniform_entries: %zd entries of %zd bytes with "
                     "%zd-byte bodies and a key at %zd:%zd do not fit %zd bytes",
                     n, size, blen, ustart, uend, in.len);
        PyBuffer_Release(&in);
        return NULL;
    }
    int same = entries_uniform((const unsigned char *)in.buf, n, size, pstart, plen, ustart,
                               uend);
    PyBuffer_Release(&in);
    return PyBool_FromLong(same);
}

/* Whether each of the n entries of size bytes at first repeats the first one's TOTALSIZE,
   BODYLENGTH and PROPERTIESLENGTH bytes (the properties start at pstart). */
static int lengths_repeat(const unsigned char *first, Py_ssize_t n, Py_ssize_t size,
                          Py_ssize_t pstart) {
    const unsigned char *e = first + size;
    for (Py_ssize_t i = 1; i < n; i++, e += size)
        if (memcmp(e + ENTRY_OFF_TOTAL_SIZE, first + ENTRY_OFF_TOTAL_SIZE, 4) != 0
                || memcmp(e + ENTRY_OFF_BODY_LENGTH, first + ENTRY_OFF_BODY_LENGTH, 4) != 0
                || memcmp(e + pstart - 2, first + pstart - 2, 2) != 0)
            return 0;
    return 1;
}

/* uniform_lengths(data, n, size, blen) -> bool

   Whether every entry repeats the first one's TOTALSIZE, BODYLENGTH and PROPERTIESLENGTH
   bytes: the layout proof of an inner batch's entries, whose properties differ. */
static PyObject *uniform_lengths(PyObject *self, PyObject *args) {
    Py_buffer in;
    Py_ssize_t n, size, blen;
    if (!PyArg_ParseTuple(args, "y*nnn", &in, &n, &size, &blen))
        return NULL;
    Py_ssize_t pstart = ENTRY_OVERHEAD + blen;
    if (n < 1 || blen < 0 || size < pstart || in.len < n * size) {
        PyErr_Format(PyExc_ValueError, "uniform_lengths: %zd entries of %zd bytes with "
                     "%zd-byte bodies do not fit %zd bytes", n, size, blen, in.len);
        PyBuffer_Release(&in);
        return NULL;
    }
    int same = lengths_repeat((const unsigned char *)in.buf, n, size, pstart);
    PyBuffer_Release(&in);
    return PyBool_FromLong(same);
}

/* offset_ids(prefix, start, step, n) -> str

   ",".join(prefix + "%016X" % (start + i * step) for i in range(n)); prefix is ASCII. */
static PyObject *offset_ids(PyObject *self, PyObject *args) {
    PyObject *prefix;
    long long start, step;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "ULLn", &prefix, &start, &step, &n))
        return NULL;
    if (!PyUnicode_IS_ASCII(prefix) || n < 0) {
        PyErr_SetString(PyExc_ValueError, "offset_ids: the prefix must be ASCII, n >= 0");
        return NULL;
    }
    Py_ssize_t plen = PyUnicode_GET_LENGTH(prefix), one = plen + 16;
    Py_ssize_t total = n ? n * one + (n - 1) : 0;
    PyObject *s = PyUnicode_New(total, 127);
    if (s == NULL)
        return NULL;
    static const char hex[] = "0123456789ABCDEF";
    unsigned char *p = PyUnicode_1BYTE_DATA(s);
    const unsigned char *pre = PyUnicode_1BYTE_DATA(prefix);
    /* An id whose offset shares the previous one's digits above the lowest six (bits 24
       and up) copies them with the prefix and writes only those six. */
    const unsigned char *last = NULL;
    uint64_t last_v = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i) *p++ = ',';
        uint64_t v = (uint64_t)(start + (long long)i * step);
        int digits = 16;
        if (last != NULL && (v >> 24) == (last_v >> 24)) {
            memcpy(p, last, (size_t)plen + 10);
            digits = 6;
        } else {
            memcpy(p, pre, (size_t)plen);
        }
        last = p;
        last_v = v;
        p += plen;
        uint64_t x = v;
        for (int d = 15; d >= 16 - digits; d--, x >>= 4)
            p[d] = (unsigned char)hex[x & 0xF];
        p += 16;
    }
    return s;
}

/* queue_entries(start, step, n, size, tags) -> bytes

   Consume-queue entries of n records at physical offsets start + i * step, each of size
   bytes and tags code tags: for each, the offset (8 bytes), the size (4) and the tags
   code (8), big-endian, 20 bytes an entry (tidemq/store/consume_queue.py's CQ_DTYPE). */
static PyObject *queue_entries(PyObject *self, PyObject *args) {
    long long start, step, tags;
    Py_ssize_t n;
    int size;
    if (!PyArg_ParseTuple(args, "LLniL", &start, &step, &n, &size, &tags))
        return NULL;
    if (n < 0 || n > PY_SSIZE_T_MAX / 20) {
        PyErr_Format(PyExc_ValueError, "queue_entries: %zd entries", n);
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * 20);
    if (out == NULL)
        return NULL;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    unsigned char rest[12]; /* the size and tags code every entry repeats */
    put_be32(rest, (uint32_t)size);
    put_be64(rest + 4, (uint64_t)tags);
    uint64_t phys = (uint64_t)start;
    for (Py_ssize_t i = 0; i < n; i++, p += 20, phys += (uint64_t)step) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        uint64_t be = __builtin_bswap64(phys);
        memcpy(p, &be, 8);
#else
        put_be64(p, phys);
#endif
        memcpy(p + 8, rest, 12);
    }
    return out;
}

/* The body CRC: zlib's CRC-32, computed by carry-less multiplication where the CPU has
   it (x86-64 PCLMULQDQ, SSE4.1), which is several times faster than zlib's table loop on
   the bodies of a few hundred bytes that records hold. The folding follows Gopal et al.,
   "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ Instruction" (Intel,
   2009): four 128-bit lanes fold 64 bytes a step, then one lane 16 bytes a step, then a
   Barrett reduction to 32 bits; the constants are x^n mod P for the bit-reflected
   polynomial 0xEDB88320 at that paper's distances. Where the CPU also has VPCLMULQDQ and
   AVX-512, buffers of 256 bytes or more first fold 256 bytes a step (an inner batch's
   body of ~20 kB: about a fifth of the 128-bit fold's time). zlib takes the buffer's
   last len % 16 bytes, and every buffer under 64 bytes. The GIL is kept: the call is
   short, and letting it go hands it to whichever thread waits. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_CLMUL_CRC 1

#define FOLD(x, k, next) \
    _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128((x), (k), 0x00), \
                                _mm_clmulepi64_si128((x), (k), 0x11)), (next))

/* The last 16-byte blocks (len a multiple of 16) folded into the 128-bit register a,
   then 128 bits to 64, then 64 to 32 with the Barrett reduction: the CRC register. */
__attribute__((target("pclmul,sse4.1")))
static uint32_t crc32_finish(__m128i a, const unsigned char *p, size_t len) {
    const __m128i k3k4 = _mm_set_epi64x(0x0ccaa009eLL, 0x1751997d0LL);
    const __m128i k5 = _mm_set_epi64x(0, 0x163cd6124LL);
    const __m128i poly = _mm_set_epi64x(0x1f7011641LL, 0x1db710641LL);
    const __m128i low32 = _mm_setr_epi32(-1, 0, -1, 0);
    for (; len >= 16; p += 16, len -= 16)
        a = FOLD(a, k3k4, _mm_loadu_si128((const __m128i *)p));
    a = _mm_xor_si128(_mm_srli_si128(a, 8), _mm_clmulepi64_si128(a, k3k4, 0x10));
    a = _mm_xor_si128(_mm_srli_si128(a, 4),
                      _mm_clmulepi64_si128(_mm_and_si128(a, low32), k5, 0x00));
    __m128i t = _mm_and_si128(_mm_clmulepi64_si128(_mm_and_si128(a, low32), poly, 0x10),
                              low32);
    a = _mm_xor_si128(a, _mm_clmulepi64_si128(t, poly, 0x00));
    return (uint32_t)_mm_extract_epi32(a, 1);
}

__attribute__((target("pclmul,sse4.1")))
static uint32_t crc32_fold(uint32_t reg, const unsigned char *p, size_t len) {
    /* len >= 64 and a multiple of 16; reg is the CRC register (the CRC inverted) */
    const __m128i k1k2 = _mm_set_epi64x(0x1c6e41596LL, 0x154442bd4LL);
    const __m128i k3k4 = _mm_set_epi64x(0x0ccaa009eLL, 0x1751997d0LL);
    __m128i a = _mm_loadu_si128((const __m128i *)p);
    __m128i b = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(p + 32));
    __m128i d = _mm_loadu_si128((const __m128i *)(p + 48));
    a = _mm_xor_si128(a, _mm_cvtsi32_si128((int)reg));
    p += 64;
    len -= 64;
    for (; len >= 64; p += 64, len -= 64) {
        a = FOLD(a, k1k2, _mm_loadu_si128((const __m128i *)p));
        b = FOLD(b, k1k2, _mm_loadu_si128((const __m128i *)(p + 16)));
        c = FOLD(c, k1k2, _mm_loadu_si128((const __m128i *)(p + 32)));
        d = FOLD(d, k1k2, _mm_loadu_si128((const __m128i *)(p + 48)));
    }
    a = FOLD(a, k3k4, b);
    a = FOLD(a, k3k4, c);
    a = FOLD(a, k3k4, d);
    return crc32_finish(a, p, len);
}

/* The same fold 256 bytes a step where the CPU has VPCLMULQDQ and AVX-512: four 512-bit
   registers of four lanes each, at a distance of 2048 bits (x^2080 and x^2016 mod P);
   their sixteen lanes, in stream order, then fold one by one at 128 bits, and the rest
   of the buffer as above. */
__attribute__((target("avx512f,avx512vl,vpclmulqdq,pclmul,sse4.1")))
static uint32_t crc32_fold_wide(uint32_t reg, const unsigned char *p, size_t len) {
    /* len >= 256 and a multiple of 16; reg is the CRC register (the CRC inverted) */
    const __m512i k = _mm512_broadcast_i32x4(_mm_set_epi64x(0x1322d1430LL, 0x11542778aLL));
    const __m128i k3k4 = _mm_set_epi64x(0x0ccaa009eLL, 0x1751997d0LL);
    __m512i a = _mm512_loadu_si512((const void *)p);
    __m512i b = _mm512_loadu_si512((const void *)(p + 64));
    __m512i c = _mm512_loadu_si512((const void *)(p + 128));
    __m512i d = _mm512_loadu_si512((const void *)(p + 192));
    a = _mm512_xor_si512(a, _mm512_inserti32x4(_mm512_setzero_si512(),
                                               _mm_cvtsi32_si128((int)reg), 0));
    p += 256;
    len -= 256;
#define FOLD512(x, next) \
    _mm512_xor_si512(_mm512_xor_si512(_mm512_clmulepi64_epi128((x), k, 0x00), \
                                      _mm512_clmulepi64_epi128((x), k, 0x11)), (next))
    for (; len >= 256; p += 256, len -= 256) {
        a = FOLD512(a, _mm512_loadu_si512((const void *)p));
        b = FOLD512(b, _mm512_loadu_si512((const void *)(p + 64)));
        c = FOLD512(c, _mm512_loadu_si512((const void *)(p + 128)));
        d = FOLD512(d, _mm512_loadu_si512((const void *)(p + 192)));
    }
#undef FOLD512
    unsigned char lanes[256];
    _mm512_storeu_si512((void *)lanes, a);
    _mm512_storeu_si512((void *)(lanes + 64), b);
    _mm512_storeu_si512((void *)(lanes + 128), c);
    _mm512_storeu_si512((void *)(lanes + 192), d);
    __m128i x = _mm_loadu_si128((const __m128i *)lanes);
    for (int i = 16; i < 256; i += 16)
        x = FOLD(x, k3k4, _mm_loadu_si128((const __m128i *)(lanes + i)));
    return crc32_finish(x, p, len);
}
#undef FOLD
#endif

static int clmul_crc = 0;  /* set at import: the CPU has PCLMULQDQ and SSE4.1 */
static int wide_crc = 0;   /* and VPCLMULQDQ with AVX-512 (F, VL) */

static uint32_t crc32_body(uint32_t crc, const unsigned char *p, size_t len) {
#ifdef HAVE_CLMUL_CRC
    if (clmul_crc && len >= 64) {
        size_t folded = len & ~(size_t)15;
        crc = ~(wide_crc && folded >= 256 ? crc32_fold_wide(~crc, p, folded)
                                          : crc32_fold(~crc, p, folded));
        p += folded;
        len -= folded;
    }
#endif
    while (len > 0x40000000u) {  /* zlib takes an unsigned int */
        crc = (uint32_t)crc32(crc, p, 0x40000000u);
        p += 0x40000000u;
        len -= 0x40000000u;
    }
    /* a folded body of whole 16-byte blocks (the usual 128-byte one) leaves no tail */
    return len ? (uint32_t)crc32(crc, p, (uInt)len) : crc;
}

/* body_crc32(data, value=0) -> int: zlib.crc32's value, computed as the record checks
   compute body CRCs. */
/* The arguments of a METH_FASTCALL function: their count checked, as PyArg_ParseTuple
   checks it (a format string parsed per call costs more than the work of a small one). */
static int fast_args(const char *name, Py_ssize_t nargs, Py_ssize_t least, Py_ssize_t most) {
    if (nargs >= least && nargs <= most)
        return 1;
    if (least == most)
        PyErr_Format(PyExc_TypeError, "%s() takes exactly %zd arguments (%zd given)", name,
                     least, nargs);
    else
        PyErr_Format(PyExc_TypeError, "%s() takes %zd to %zd arguments (%zd given)", name,
                     least, most, nargs);
    return 0;
}

static PyObject *body_crc32(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer in;
    unsigned int value = 0;
    if (!fast_args("body_crc32", nargs, 1, 2))
        return NULL;
    if (nargs == 2) {
        if (!PyLong_Check(args[1])) {
            PyErr_SetString(PyExc_TypeError, "body_crc32: the start value is an int");
            return NULL;
        }
        value = (unsigned int)PyLong_AsUnsignedLongMask(args[1]);
        if (value == (unsigned int)-1 && PyErr_Occurred())
            return NULL;
    }
    if (PyObject_GetBuffer(args[0], &in, PyBUF_SIMPLE) != 0)
        return NULL;
    uint32_t crc = crc32_body(value, (const unsigned char *)in.buf, (size_t)in.len);
    PyBuffer_Release(&in);
    return PyLong_FromUnsignedLong(crc);
}

static int32_t get_be32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8)
                     | (uint32_t)p[3]);
}

static int is_ascii(const unsigned char *p, Py_ssize_t n) {
    unsigned char any = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        any |= p[i];
    return any < 0x80;
}

/* Whether the record of `size` bytes at r, stored at log position `phys`, is sound
   beyond doubt: TOTALSIZE is `size`, a record magic, PHYSICALOFFSET is `phys`, the field
   lengths add up to TOTALSIZE, BODYCRC matches, topic and properties are ASCII. */
static int record_sound(const unsigned char *r, Py_ssize_t size, long long phys) {
    if (size < MIN_RECORD_SIZE || get_be32(r) != size)
        return 0;
    int32_t magic = get_be32(r + OFF_MAGIC);
    if (magic != MAGIC_V1 && magic != MAGIC_V2)
        return 0;
    uint64_t at_phys = ((uint64_t)(uint32_t)get_be32(r + OFF_PHYSICAL_OFFSET) << 32)
                       | (uint32_t)get_be32(r + OFF_PHYSICAL_OFFSET + 4);
    if ((long long)at_phys != phys)
        return 0;
    int32_t sys = get_be32(r + OFF_SYSFLAG);
    /* BORNHOST, STORETIMESTAMP, STOREHOST, RECONSUMETIMES, PREPARED_TX_OFFSET */
    Py_ssize_t at = OFF_BORN_HOST + ((sys & SYSFLAG_BORNHOST_V6) ? 20 : 8) + 8
                    + ((sys & SYSFLAG_STOREHOST_V6) ? 20 : 8) + 4 + 8;
    if (at + 4 > size)
        return 0;
    int32_t blen = get_be32(r + at);
    at += 4;
    if (blen < 0 || blen > size - at)
        return 0;
    const unsigned char *body = r + at;
    at += blen;
    Py_ssize_t tlen;
    if (magic == MAGIC_V1) {
        if (at + 1 > size || r[at] > 127)
            return 0;
        tlen = r[at];
        at += 1;
    } else {
        if (at + 2 > size)
            return 0;
        tlen = (int16_t)(((unsigned)r[at] << 8) | r[at + 1]);
        at += 2;
    }
    if (tlen < 0 || tlen > size - at || !is_ascii(r + at, tlen))
        return 0;
    at += tlen;
    if (at + 2 > size)
        return 0;
    Py_ssize_t plen = (int16_t)(((unsigned)r[at] << 8) | r[at + 1]);
    at += 2;
    if (plen < 0 || at + plen != size || !is_ascii(r + at, plen))
        return 0;
    uint32_t crc = crc32_body(0, body, (size_t)blen) & 0x7FFFFFFFu;
    return (uint32_t)get_be32(r + OFF_BODY_CRC) == crc;
}

/* A sequence of integers as check_records takes it: a contiguous buffer of 64-bit
   integers (a numpy int64 array: no object per item), else any sequence of ints. */
/* A tuple of obj's items (obj itself when it is one), with TypeError `what` when obj is
   not iterable. Loops read items from it, not from a list: converting an item may run
   its own code (an __index__, a comparison), which could change a list under the loop. */
static PyObject *items_of(PyObject *obj, const char *what) {
    PyObject *items = PySequence_Tuple(obj);
    if (items == NULL && PyErr_ExceptionMatches(PyExc_TypeError)) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, what);
    }
    return items;
}

typedef struct {
    Py_buffer buf;
    PyObject *seq;  /* NULL when buf holds the integers */
    Py_ssize_t n;
} ints_t;

static int ints_open(PyObject *obj, ints_t *v, const char *what) {
    v->seq = NULL;
    if (PyObject_CheckBuffer(obj)
            && PyObject_GetBuffer(obj, &v->buf, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) == 0) {
        const char *f = v->buf.format;
        if (f != NULL && (*f == '<' || *f == '=' || *f == '@'))
            f++;
        if (v->buf.itemsize == 8 && v->buf.ndim == 1 && f != NULL
                && (strcmp(f, "q") == 0 || strcmp(f, "l") == 0)) {
            v->n = v->buf.shape[0];
            return 0;
        }
        PyBuffer_Release(&v->buf);
    }
    PyErr_Clear();
    v->seq = items_of(obj, what);
    if (v->seq == NULL)
        return -1;
    v->n = PySequence_Fast_GET_SIZE(v->seq);
    return 0;
}

static Py_ssize_t ints_get(const ints_t *v, Py_ssize_t i) {
    if (v->seq == NULL)
        return (Py_ssize_t)((const int64_t *)v->buf.buf)[i];
    return PyNumber_AsSsize_t(PySequence_Fast_GET_ITEM(v->seq, i), PyExc_OverflowError);
}

static void ints_close(ints_t *v) {
    if (v->seq != NULL)
        Py_DECREF(v->seq);
    else
        PyBuffer_Release(&v->buf);
}

/* check_records(buf, phys, starts, sizes) -> int

   Record i of buf is the sizes[i] bytes at starts[i], stored at log position
   phys + starts[i]: how many of them, from the first, are sound beyond doubt (see
   record_sound). The record where this stops may still be sound (UTF-8 beyond ASCII):
   the caller looks closer. starts and sizes are int64 arrays or sequences of ints. */
static PyObject *check_records(PyObject *self, PyObject *args) {
    Py_buffer in;
    long long phys;
    PyObject *starts, *sizes, *result = NULL;
    ints_t at_v, size_v;
    if (!PyArg_ParseTuple(args, "y*LOO", &in, &phys, &starts, &sizes))
        return NULL;
    if (ints_open(starts, &at_v, "check_records: starts must be a sequence") < 0) {
        PyBuffer_Release(&in);
        return NULL;
    }
    if (ints_open(sizes, &size_v, "check_records: sizes must be a sequence") < 0) {
        ints_close(&at_v);
        PyBuffer_Release(&in);
        return NULL;
    }
    Py_ssize_t n = size_v.n, i;
    if (at_v.n != n) {
        PyErr_SetString(PyExc_ValueError, "check_records: starts and sizes differ in length");
        goto done;
    }
    const unsigned char *b = in.buf;
    for (i = 0; i < n; i++) {
        Py_ssize_t at = ints_get(&at_v, i), size = ints_get(&size_v, i);
        if ((at == -1 || size == -1) && PyErr_Occurred())
            goto done;
        if (at < 0 || size < MIN_RECORD_SIZE || size > in.len - at
                || !record_sound(b + at, size, phys + (long long)at))
            break;
    }
    result = PyLong_FromSsize_t(i);
done:
    ints_close(&at_v);
    ints_close(&size_v);
    PyBuffer_Release(&in);
    return result;
}

/* Whether o is an int in [lo, hi]; *v gets it. Else an OverflowError (or the TypeError of
   a non-integer) naming the field and record. */
static int get_ranged(PyObject *o, long long lo, long long hi, const char *what,
                      Py_ssize_t i, long long *v) {
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (x == -1 && PyErr_Occurred())
        return -1;
    if (overflow || x < lo || x > hi) {
        PyErr_Format(PyExc_OverflowError, "write_records: %s of record %zd out of range",
                     what, i);
        return -1;
    }
    *v = x;
    return 0;
}

#define N_COLUMNS 8

/* write_records(buf, pos, topic_field, born_host, store_host, reconsume_times, store_ts,
                 queue_ids, flags, queue_offsets, phys_offsets, sys_flags, born_ts,
                 bodies, properties) -> int

   Write one V1 record with IPv4 hosts per item of the columns (equal-length sequences;
   bodies bytes or byte buffers, properties bytes), one after another from buf[pos]: TOTALSIZE, V1 magic,
   the body's masked CRC32, PREPARED_TX_OFFSET 0, a born timestamp of 0 written as the
   store time, topic_field (TOPICLENGTH and TOPIC) and the 8-byte packed hosts as given.
   Every field is checked first: a field out of its range, a wrong type or too little
   room raises, and nothing is written. Returns the bytes written. */
static PyObject *write_records(PyObject *self, PyObject *args) {
    Py_buffer out;
    Py_ssize_t pos;
    const char *tf, *bh, *sh;
    Py_ssize_t tlen, bhlen, shlen;
    int reconsume;
    long long ts;
    PyObject *cols[N_COLUMNS];
    PyObject *seqs[N_COLUMNS] = {NULL};
    static const char *names[N_COLUMNS] = {"queue id", "flag", "queue offset",
        "physical offset", "sys flag", "born timestamp", "body", "properties"};
    static const long long lo[6] = {INT32_MIN, INT32_MIN, INT64_MIN, INT64_MIN, INT32_MIN,
                                    INT64_MIN};
    static const long long hi[6] = {INT32_MAX, INT32_MAX, INT64_MAX, INT64_MAX, INT32_MAX,
                                    INT64_MAX};
    if (!PyArg_ParseTuple(args, "w*ny#y#y#iLOOOOOOOO", &out, &pos, &tf, &tlen, &bh, &bhlen,
                          &sh, &shlen, &reconsume, &ts, &cols[0], &cols[1], &cols[2],
                          &cols[3], &cols[4], &cols[5], &cols[6], &cols[7]))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = -1;
    if (tlen < 1 || tlen > 128 || bhlen != 8 || shlen != 8) {
        PyErr_SetString(PyExc_ValueError, "write_records: the topic field takes 1 to 128 "
                        "bytes and each host 8");
        goto done;
    }
    for (int c = 0; c < N_COLUMNS; c++) {
        seqs[c] = items_of(cols[c], "write_records: the columns are sequences");
        if (seqs[c] == NULL)
            goto done;
        Py_ssize_t len = PySequence_Fast_GET_SIZE(seqs[c]);
        if (n >= 0 && len != n) {
            PyErr_SetString(PyExc_ValueError, "write_records: the columns differ in length");
            goto done;
        }
        n = len;
    }
    PyObject **col[N_COLUMNS];
    for (int c = 0; c < N_COLUMNS; c++)
        col[c] = PySequence_Fast_ITEMS(seqs[c]);
    /* First every field checked and the room counted: nothing is written on an error. */
    Py_ssize_t total = 0;
    long long v;
    for (Py_ssize_t i = 0; i < n; i++) {
        for (int c = 0; c < 6; c++)
            if (get_ranged(col[c][i], lo[c], hi[c], names[c], i, &v) < 0)
                goto done;
        if (!PyBytes_Check(col[7][i])) {
            PyErr_Format(PyExc_TypeError, "write_records: the properties of record %zd are "
                         "not bytes", i);
            goto done;
        }
        Py_ssize_t blen, plen = PyBytes_GET_SIZE(col[7][i]);
        if (PyBytes_Check(col[6][i])) {
            blen = PyBytes_GET_SIZE(col[6][i]);
        } else {  /* a buffer whose len() is its byte count, in one piece */
            Py_buffer b;
            if (PyObject_GetBuffer(col[6][i], &b, PyBUF_SIMPLE) < 0)
                goto done;
            blen = b.len;
            PyBuffer_Release(&b);
            Py_ssize_t items = PyObject_Length(col[6][i]);
            if (items < 0)
                goto done;
            if (items != blen) {
                PyErr_Format(PyExc_TypeError, "write_records: the body of record %zd is not "
                             "a buffer of bytes", i);
                goto done;
            }
        }
        if (plen > 0x7FFF || blen > INT32_MAX - OFF_BODY - 2 - tlen - plen) {
            PyErr_Format(PyExc_OverflowError, "write_records: record %zd is too large", i);
            goto done;
        }
        total += OFF_BODY + blen + tlen + 2 + plen;
    }
    if (pos < 0 || pos > out.len || total > out.len - pos) {
        PyErr_Format(PyExc_ValueError, "write_records: %zd bytes do not fit %zd bytes at %zd",
                     total, out.len, pos);
        goto done;
    }
    unsigned char *p = (unsigned char *)out.buf + pos;
    for (Py_ssize_t i = 0; i < n; i++) {
        long long f[6];
        for (int c = 0; c < 6; c++)
            f[c] = PyLong_AsLongLong(col[c][i]);  /* checked above */
        Py_buffer b;
        if (PyObject_GetBuffer(col[6][i], &b, PyBUF_SIMPLE) < 0)
            goto done;  /* given a moment ago: only a buffer exporter gone mad fails here */
        const unsigned char *body = (const unsigned char *)b.buf;
        const char *props = PyBytes_AS_STRING(col[7][i]);
        Py_ssize_t blen = b.len, plen = PyBytes_GET_SIZE(col[7][i]);
        Py_ssize_t size = OFF_BODY + blen + tlen + 2 + plen;
        put_be32(p, (uint32_t)size);
        put_be32(p + OFF_MAGIC, (uint32_t)MAGIC_V1);
        put_be32(p + OFF_BODY_CRC, crc32_body(0, body, (size_t)blen) & 0x7FFFFFFFu);
        put_be32(p + OFF_QUEUE_ID, (uint32_t)f[0]);
        put_be32(p + OFF_FLAG, (uint32_t)f[1]);
        put_be64(p + OFF_QUEUE_OFFSET, (uint64_t)f[2]);
        put_be64(p + OFF_PHYSICAL_OFFSET, (uint64_t)f[3]);
        put_be32(p + OFF_SYSFLAG, (uint32_t)f[4]);
        put_be64(p + OFF_BORN_TIMESTAMP, (uint64_t)(f[5] ? f[5] : ts));
        memcpy(p + OFF_BORN_HOST, bh, 8);
        put_be64(p + OFF_STORE_TIMESTAMP, (uint64_t)ts);
        memcpy(p + OFF_STORE_HOST, sh, 8);
        put_be32(p + OFF_RECONSUME_TIMES, (uint32_t)reconsume);
        put_be64(p + OFF_PREPARED_TX_OFFSET, 0);
        put_be32(p + OFF_BODY_LENGTH, (uint32_t)blen);
        memcpy(p + OFF_BODY, body, (size_t)blen);
        memcpy(p + OFF_BODY + blen, tf, (size_t)tlen);
        p[OFF_BODY + blen + tlen] = (unsigned char)(plen >> 8);
        p[OFF_BODY + blen + tlen + 1] = (unsigned char)plen;
        memcpy(p + OFF_BODY + blen + tlen + 2, props, (size_t)plen);
        PyBuffer_Release(&b);
        p += size;
    }
    result = PyLong_FromSsize_t(total);
done:
    for (int c = 0; c < N_COLUMNS; c++)
        Py_XDECREF(seqs[c]);
    PyBuffer_Release(&out);
    return result;
}

/* inner_facts(text, plain, cluster_pair) -> (count, properties, uniq, keys, wait, tags_code)
                                            or None

   What a SEND_BATCH_MESSAGE to a BatchCQ topic stores (RIP-26), read in one call when the
   send has the usual shape; None sends the caller to the general path, which also names
   what is wrong. The usual shape: `text` is ASCII, every segment between 0x02 separators
   (the last one optional) is one name, one 0x01 and one value, both non-empty, at most
   MAX_FACT_PAIRS pairs, no name twice; UNIQ_KEY is there, INNER_BASE and
   INNER_MULTI_DISPATCH are not; `plain` is at least four entries of the first one's
   size and length fields (the check of uniform_lengths), at most 0x7FFF, and the first
   entry's properties do not name INNER_MULTI_DISPATCH; an INNER_NUM says the count.
   Then: the stored properties (the pairs less INNER_NUM, each ended by 0x02, and
   cluster_pair when there is no CLUSTER), the keys (UNIQ_KEY, then KEYS split on spaces,
   empty ones dropped), whether WAIT is other than "false" in any case, and Java's
   String.hashCode of TAGS (0 without). The twin: tidemq/formats/record/inner_send.py. */
#define MAX_FACT_PAIRS 64
#define INNER_MIN_ENTRIES 4
#define INNER_MAX_ENTRIES 0x7FFF

typedef struct {
    Py_ssize_t name, name_len, value, value_len;
} pair_t;

static int name_is(const char *t, const pair_t *p, const char *name) {
    size_t n = strlen(name);
    return (size_t)p->name_len == n && memcmp(t + p->name, name, n) == 0;
}

static const unsigned char multi_key[] = "INNER_MULTI_DISPATCH\x01";

/* Whether the n bytes at p name INNER_MULTI_DISPATCH: at the start or after a 0x02. */
static int names_multi(const unsigned char *p, Py_ssize_t n) {
    const Py_ssize_t k = (Py_ssize_t)sizeof(multi_key) - 1;
    for (Py_ssize_t i = 0; i + k <= n; i++)
        if ((i == 0 || p[i - 1] == 0x02) && memcmp(p + i, multi_key, (size_t)k) == 0)
            return 1;
    return 0;
}

/* The entry count of an inner batch body of the usual shape, else 0. */
static Py_ssize_t inner_count_of(const unsigned char *b, Py_ssize_t n_bytes) {
    if (n_bytes < INNER_MIN_ENTRIES * ENTRY_OVERHEAD)
        return 0;
    int32_t size = get_be32(b + ENTRY_OFF_TOTAL_SIZE), blen = get_be32(b + ENTRY_OFF_BODY_LENGTH);
    if (size < ENTRY_OVERHEAD || n_bytes % size || blen < 0 || blen > size - ENTRY_OVERHEAD)
        return 0;
    Py_ssize_t start = ENTRY_OVERHEAD + (Py_ssize_t)blen;
    int16_t plen = (int16_t)((b[start - 2] << 8) | b[start - 1]);
    Py_ssize_t n = n_bytes / size;
    if (start + plen != size || n < INNER_MIN_ENTRIES || n > INNER_MAX_ENTRIES)
        return 0;
    if (!lengths_repeat(b, n, size, start) || names_multi(b + start, plen))
        return 0;
    return n;
}

static PyObject *inner_facts(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *text;
    Py_buffer plain;
    const char *cluster;
    Py_ssize_t cluster_len;
    if (!fast_args("inner_facts", nargs, 3, 3))
        return NULL;
    text = args[0];
    if (!PyUnicode_Check(text) || !PyBytes_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "inner_facts: a str text and a bytes cluster pair");
        return NULL;
    }
    cluster = PyBytes_AS_STRING(args[2]);
    cluster_len = PyBytes_GET_SIZE(args[2]);
    if (PyObject_GetBuffer(args[1], &plain, PyBUF_SIMPLE) != 0)
        return NULL;
    PyObject *result = NULL, *raw = NULL, *uniq = NULL, *keys = NULL;
    pair_t pairs[MAX_FACT_PAIRS];
    int n_pairs = 0, at_uniq = -1, at_num = -1, at_keys = -1, at_wait = -1, at_tags = -1;
    int has_cluster = 0;
    Py_ssize_t len = PyUnicode_GET_LENGTH(text);
    if (!PyUnicode_IS_ASCII(text) || len == 0)
        goto fallback;
    const char *t = (const char *)PyUnicode_DATA(text);
    for (Py_ssize_t i = 0; i < len;) {
        const char *stop = memchr(t + i, 0x02, (size_t)(len - i));
        Py_ssize_t j = stop != NULL ? stop - t : len;
        const char *sep = memchr(t + i, 0x01, (size_t)(j - i));
        if (sep == NULL || n_pairs == MAX_FACT_PAIRS)
            goto fallback;
        Py_ssize_t k = sep - t;
        if (k == i || k + 1 == j || memchr(t + k + 1, 0x01, (size_t)(j - k - 1)) != NULL)
            goto fallback;
        pair_t *p = &pairs[n_pairs];
        p->name = i;
        p->name_len = k - i;
        p->value = k + 1;
        p->value_len = j - k - 1;
        for (int q = 0; q < n_pairs; q++)
            if (pairs[q].name_len == p->name_len
                    && memcmp(t + pairs[q].name, t + p->name, (size_t)p->name_len) == 0)
                goto fallback;
        if (name_is(t, p, "UNIQ_KEY")) at_uniq = n_pairs;
        else if (name_is(t, p, "INNER_NUM")) at_num = n_pairs;
        else if (name_is(t, p, "KEYS")) at_keys = n_pairs;
        else if (name_is(t, p, "WAIT")) at_wait = n_pairs;
        else if (name_is(t, p, "TAGS")) at_tags = n_pairs;
        else if (name_is(t, p, "CLUSTER")) has_cluster = 1;
        else if (name_is(t, p, "INNER_BASE") || name_is(t, p, "INNER_MULTI_DISPATCH"))
            goto fallback;
        n_pairs++;
        i = j + 1;
    }
    if (at_uniq < 0)
        goto fallback;
    Py_ssize_t count = inner_count_of(plain.buf, plain.len);
    if (count == 0)
        goto fallback;
    if (at_num >= 0) {
        char digits[24];
        int nd = snprintf(digits, sizeof digits, "%zd", count);
        const pair_t *p = &pairs[at_num];
        if (p->value_len != nd || memcmp(t + p->value, digits, (size_t)nd) != 0)
            goto fallback;
    }
    Py_ssize_t out_len = has_cluster ? 0 : cluster_len;
    for (int q = 0; q < n_pairs; q++)
        if (q != at_num)
            out_len += pairs[q].name_len + pairs[q].value_len + 2;
    raw = PyBytes_FromStringAndSize(NULL, out_len);
    if (raw == NULL)
        goto done;
    char *w = PyBytes_AS_STRING(raw);
    for (int q = 0; q < n_pairs; q++) {
        if (q == at_num)
            continue;
        Py_ssize_t seg = pairs[q].name_len + 1 + pairs[q].value_len;
        memcpy(w, t + pairs[q].name, (size_t)seg);
        w[seg] = 0x02;
        w += seg + 1;
    }
    if (!has_cluster)
        memcpy(w, cluster, (size_t)cluster_len);
    const pair_t *u = &pairs[at_uniq];
    uniq = PyUnicode_FromStringAndSize(t + u->value, u->value_len);
    if (uniq == NULL)
        goto done;
    Py_ssize_t n_keys = 1;
    const char *kv = NULL;
    Py_ssize_t kv_len = 0;
    if (at_keys >= 0) {
        kv = t + pairs[at_keys].value;
        kv_len = pairs[at_keys].value_len;
        for (Py_ssize_t i = 0; i < kv_len; i++)
            if (kv[i] != ' ' && (i == 0 || kv[i - 1] == ' '))
                n_keys++;
    }
    keys = PyTuple_New(n_keys);
    if (keys == NULL)
        goto done;
    Py_INCREF(uniq);
    PyTuple_SET_ITEM(keys, 0, uniq);
    Py_ssize_t slot = 1;
    for (Py_ssize_t i = 0; i < kv_len;) {
        if (kv[i] == ' ') {
            i++;
            continue;
        }
        Py_ssize_t j = i;
        while (j < kv_len && kv[j] != ' ')
            j++;
        PyObject *key = PyUnicode_FromStringAndSize(kv + i, j - i);
        if (key == NULL)
            goto done;
        PyTuple_SET_ITEM(keys, slot++, key);
        i = j;
    }
    int wait = 1;
    if (at_wait >= 0) {
        const pair_t *p = &pairs[at_wait];
        wait = !(p->value_len == 5 && PyOS_strnicmp(t + p->value, "false", 5) == 0);
    }
    int32_t hash = 0;
    if (at_tags >= 0) {
        uint32_t h = 0;
        const pair_t *p = &pairs[at_tags];
        for (Py_ssize_t i = 0; i < p->value_len; i++)
            h = 31u * h + (unsigned char)t[p->value + i];
        hash = (int32_t)h;
    }
    result = Py_BuildValue("(nOOOOl)", count, raw, uniq, keys, wait ? Py_True : Py_False,
                           (long)hash);
    goto done;
fallback:
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(raw);
    Py_XDECREF(uniq);
    Py_XDECREF(keys);
    PyBuffer_Release(&plain);
    return result;
}

/* send_fields(names, ext, batch) -> (topic, queue id, sysFlag, born timestamp, flag,
                                      properties, reconsumeTimes) or None

   tidemq.codec.headers.decode_send_fields of a send header's ext map (a dict of str),
   `names` its twelve keys in the header's form: the eight required ones (producer group,
   topic, default topic, default queue count, queue id, sysFlag, born timestamp, flag),
   then properties, reconsumeTimes, maxReconsumeTimes and batch. None unless every
   required key is there, the five numbers are 1-9 ASCII digits (the born timestamp 1-18),
   the optional numbers present are 1-9 ASCII digits, and (unless `batch`) the batch flag
   present is not "1" nor "true" in any case. A value that is not a str is not the plain
   case either. The twin: py_decode_send_fields of tidemq/codec/headers.py. */
static int digits_of(PyObject *v, Py_ssize_t most, long long *out) {
    if (!PyUnicode_Check(v) || !PyUnicode_IS_ASCII(v))
        return 0;
    Py_ssize_t n = PyUnicode_GET_LENGTH(v);
    if (n < 1 || n > most)
        return 0;
    const char *d = (const char *)PyUnicode_DATA(v);
    long long x = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (d[i] < '0' || d[i] > '9')
            return 0;
        x = x * 10 + (d[i] - '0');
    }
    *out = x;
    return 1;
}

#define SEND_NAMES 12

static PyObject *send_fields(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *names, *ext, *v[SEND_NAMES];
    int batch;
    if (!fast_args("send_fields", nargs, 3, 3))
        return NULL;
    names = args[0];
    ext = args[1];
    if (!PyTuple_Check(names) || !PyDict_Check(ext)) {
        PyErr_SetString(PyExc_TypeError, "send_fields: a tuple of names and a dict");
        return NULL;
    }
    batch = PyObject_IsTrue(args[2]);
    if (batch < 0)
        return NULL;
    if (PyTuple_GET_SIZE(names) != SEND_NAMES) {
        PyErr_SetString(PyExc_ValueError, "send_fields: twelve names");
        return NULL;
    }
    for (int i = 0; i < SEND_NAMES; i++) {
        v[i] = PyDict_GetItemWithError(ext, PyTuple_GET_ITEM(names, i));  /* borrowed */
        if (v[i] == NULL && PyErr_Occurred())
            return NULL;
        if (v[i] == NULL && i < 8)
            Py_RETURN_NONE;
    }
    long long nums, qid, sys_flag, born, flag, reconsume = 0, unused;
    if (!PyUnicode_Check(v[1]) || !digits_of(v[3], 9, &nums) || !digits_of(v[4], 9, &qid)
            || !digits_of(v[5], 9, &sys_flag) || !digits_of(v[6], 18, &born)
            || !digits_of(v[7], 9, &flag)
            || (v[8] != NULL && !PyUnicode_Check(v[8]))
            || (v[9] != NULL && !digits_of(v[9], 9, &reconsume))
            || (v[10] != NULL && !digits_of(v[10], 9, &unused)))
        Py_RETURN_NONE;
    (void)nums;
    if (!batch && v[11] != NULL) {
        if (!PyUnicode_Check(v[11]))
            Py_RETURN_NONE;
        if (PyUnicode_CompareWithASCIIString(v[11], "1") == 0)
            Py_RETURN_NONE;
        if (PyUnicode_IS_ASCII(v[11]) && PyUnicode_GET_LENGTH(v[11]) == 4
                && PyOS_strnicmp((const char *)PyUnicode_DATA(v[11]), "true", 4) == 0)
            Py_RETURN_NONE;
    }
    return Py_BuildValue("(OLLLLOL)", v[1], qid, sys_flag, born, flag,
                         v[8] != NULL ? v[8] : Py_None, reconsume);
}

/* link_index_entries(buf, slots_at, slot_num, entries_at, count_at, first, hashes, phys,
                      diffs)

   Append n key-index entries to the index file in buf, numbered first .. first + n - 1,
   and chain each behind the newest entry of its slot (hash mod slot_num): the slot
   table is slot_num big-endian int32 at slots_at, entry k the 20 bytes at
   entries_at + 20 * k (hash int32, phys int64, diff int32, prev int32); a slot head
   outside 1 .. first - 1 is stale or torn and counts as empty. hashes, phys and diffs
   are n int64 each. Writes the entries, then indexCount (first + n, int32 at count_at),
   then the slots, so no slot points past indexCount. Returns how many slots were empty. */
typedef struct { int64_t slot; int32_t num; } slot_link;
#define LINK_AHEAD 16

static PyObject *link_index_entries(PyObject *self, PyObject *args) {
    Py_buffer out, hb, pb, db;
    Py_ssize_t slots_at, slot_num, entries_at, count_at, first;
    if (!PyArg_ParseTuple(args, "w*nnnnny*y*y*", &out, &slots_at, &slot_num, &entries_at,
                          &count_at, &first, &hb, &pb, &db))
        return NULL;
    PyObject *result = NULL;
    slot_link *links = NULL;
    Py_ssize_t n = hb.len / 8;
    if (hb.len % 8 || pb.len != hb.len || db.len != hb.len || slot_num < 1 || first < 1
            || first + n > INT32_MAX || slots_at < 0 || entries_at < 0 || count_at < 0
            || slots_at + 4 * slot_num > out.len || count_at + 4 > out.len
            || entries_at + 20 * (first + n) > out.len) {
        PyErr_Format(PyExc_ValueError,
                     "link_index_entries: %zd entries after entry %zd (slots of %zd at %zd, "
                     "entries at %zd, count at %zd) do not fit %zd bytes, or the columns "
                     "are not int64 of one length", n, first, slot_num, slots_at,
                     entries_at, count_at, out.len);
        goto done;
    }
    size_t cap = 16;
    while (cap < 2 * (size_t)n)
        cap <<= 1;
    links = PyMem_Calloc(cap, sizeof(slot_link));
    if (links == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    unsigned char *base = (unsigned char *)out.buf;
    unsigned char *table = base + slots_at;
    const int64_t *hashes = (const int64_t *)hb.buf;
    const int64_t *phys = (const int64_t *)pb.buf;
    const int64_t *diffs = (const int64_t *)db.buf;
    Py_ssize_t empty = 0;
    unsigned char *e = base + entries_at + 20 * first;
    for (Py_ssize_t i = 0; i < n; i++, e += 20) {
        if (i + LINK_AHEAD < n) {  /* the slot heads are random reads of a large table */
            int64_t ahead = hashes[i + LINK_AHEAD] % slot_num;
            __builtin_prefetch(table + 4 * (ahead < 0 ? ahead + slot_num : ahead), 1);
        }
        int64_t s = hashes[i] % slot_num;
        if (s < 0)
            s += slot_num;
        size_t k = (size_t)(((uint64_t)s * 0x9E3779B97F4A7C15ULL) >> 20) & (cap - 1);
        while (links[k].num && links[k].slot != s)
            k = (k + 1) & (cap - 1);
        int32_t prev;
        if (links[k].num) {  /* chained behind an entry of this call */
            prev = links[k].num;
        } else {
            const unsigned char *t = table + 4 * s;
            int64_t head = (int32_t)((uint32_t)t[0] << 24 | (uint32_t)t[1] << 16
                                     | (uint32_t)t[2] << 8 | t[3]);
            prev = head >= 1 && head < first ? (int32_t)head : 0;
            empty += prev == 0;
            links[k].slot = s;
        }
        links[k].num = (int32_t)(first + i);
        put_be32(e, (uint32_t)hashes[i]);
        put_be64(e + 4, (uint64_t)phys[i]);
        put_be32(e + 12, (uint32_t)diffs[i]);
        put_be32(e + 16, (uint32_t)prev);
    }
    put_be32(base + count_at, (uint32_t)(first + n));
    for (size_t k = 0; k < cap; k++)
        if (links[k].num)
            put_be32(table + 4 * links[k].slot, (uint32_t)links[k].num);
    result = PyLong_FromSsize_t(empty);
done:
    PyMem_Free(links);
    PyBuffer_Release(&out);
    PyBuffer_Release(&hb);
    PyBuffer_Release(&pb);
    PyBuffer_Release(&db);
    return result;
}

/* Java's Math.abs of a hash, and 0 for Integer.MIN_VALUE, as upstream's index uses it. */
static inline int64_t index_abs(uint32_t h) {
    int32_t v = (int32_t)h;
    return v == INT32_MIN ? 0 : (v < 0 ? -(int64_t)v : v);
}

#ifdef HAVE_CLMUL_CRC
static int avx2_hashes = 0;  /* set at import: the CPU has AVX2 */

/* key_hashes' rows as dot products: h = seed * 31^width + sum of byte j * 31^(width-1-j)
   (mod 2**32) is the recurrence h = 31 * h + byte unrolled, so eight bytes of a row are
   weighted (pw: the powers, in row order) and summed a step, with no product waiting for
   another. */
__attribute__((target("avx2")))
static void hash_rows_avx2(const unsigned char *r, Py_ssize_t n, Py_ssize_t width,
                           const uint32_t *pw, uint32_t start, int64_t *o) {
    Py_ssize_t w8 = width & ~(Py_ssize_t)7;
    for (Py_ssize_t i = 0; i < n; i++, r += width) {
        __m256i acc = _mm256_setzero_si256();
        Py_ssize_t j = 0;
        for (; j < w8; j += 8) {
            __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(r + j)));
            __m256i k = _mm256_loadu_si256((const __m256i *)(pw + j));
            acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(c, k));
        }
        __m128i s = _mm_add_epi32(_mm256_castsi256_si128(acc),
                                  _mm256_extracti128_si256(acc, 1));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
        uint32_t h = start + (uint32_t)_mm_cvtsi128_si32(s);
        for (; j < width; j++)
            h += (uint32_t)r[j] * pw[j];
        o[i] = index_abs(h);
    }
}
#endif

/* key_hashes(out, rows, width, seed, vector=True)

   The key index's hash of each of the n rows of `width` ASCII bytes in `rows`, after a
   prefix whose Java String.hashCode mod 2**32 is `seed`: Java's hashCode of prefix + row
   (h = 31 * h + byte, mod 2**32), made non-negative as upstream does (Math.abs, and 0 for
   Integer.MIN_VALUE), into out (n int64). With AVX2 (and `vector`, which the tests turn
   off to hold the other loop to the twin too), each row as a dot product
   (hash_rows_avx2); else four rows a step, so that the multiplications of one row do not
   wait for each other's. */
static PyObject *key_hashes(PyObject *self, PyObject *args) {
    Py_buffer out, in;
    Py_ssize_t width;
    unsigned long seed;
    int vector = 1;
    if (!PyArg_ParseTuple(args, "w*y*nk|p", &out, &in, &width, &seed, &vector))
        return NULL;
    Py_ssize_t n = out.len / 8;
    if (out.len % 8 || width < 1 || in.len != n * width) {
        PyErr_Format(PyExc_ValueError, "key_hashes: %zd bytes of rows are not %zd rows of "
                     "%zd bytes, or out is not int64", in.len, n, width);
        PyBuffer_Release(&out);
        PyBuffer_Release(&in);
        return NULL;
    }
    const unsigned char *r = (const unsigned char *)in.buf;
    int64_t *o = (int64_t *)out.buf;
    uint32_t h0 = (uint32_t)seed;
#ifdef HAVE_CLMUL_CRC
    if (avx2_hashes && vector) {
        uint32_t few[256];
        uint32_t *pw = width <= 256 ? few : PyMem_Malloc((size_t)width * sizeof(uint32_t));
        if (pw == NULL) {
            PyBuffer_Release(&out);
            PyBuffer_Release(&in);
            return PyErr_NoMemory();
        }
        uint32_t power = 1;
        for (Py_ssize_t j = width - 1; j >= 0; j--, power *= 31u)
            pw[j] = power;
        hash_rows_avx2(r, n, width, pw, h0 * power, o);
        if (pw != few)
            PyMem_Free(pw);
        PyBuffer_Release(&out);
        PyBuffer_Release(&in);
        Py_RETURN_NONE;
    }
#endif
    Py_ssize_t i = 0;
    for (; i + 4 <= n; i += 4, r += 4 * width) {
        uint32_t a = h0, b = h0, c = h0, d = h0;
        for (Py_ssize_t j = 0; j < width; j++) {
            a = 31u * a + r[j];
            b = 31u * b + r[width + j];
            c = 31u * c + r[2 * width + j];
            d = 31u * d + r[3 * width + j];
        }
        o[i] = index_abs(a);
        o[i + 1] = index_abs(b);
        o[i + 2] = index_abs(c);
        o[i + 3] = index_abs(d);
    }
    for (; i < n; i++, r += width) {
        uint32_t a = h0;
        for (Py_ssize_t j = 0; j < width; j++)
            a = 31u * a + r[j];
        o[i] = index_abs(a);
    }
    PyBuffer_Release(&out);
    PyBuffer_Release(&in);
    Py_RETURN_NONE;
}

/* str_key_hashes(out, keys, seeds, counts)

   The key index's hash of each key of `keys` (a list of str) after its record's prefix:
   record r has the next counts[r] keys (int64) and a prefix whose Java String.hashCode
   mod 2**32 is seeds[r] (uint32). Java's hashCode runs over UTF-16 units, so a character
   beyond the BMP counts as its two surrogates; made non-negative as upstream does, into
   out (int64, one per key). The keys of records queued one by one (a trace message's
   hundreds of msgIds) hashed without a bytes copy or a matrix of them; a one-byte key of
   up to POW31_CACHED characters as a dot product with the powers of 31 (with AVX2 and
   `vector`, which the tests turn off to hold the other loop to the twin too, by
   hash_rows_avx2). */
#define POW31_CACHED 64

/* The index hash of the len units of a str's data (its kind) after a prefix whose hash is
   h, into *o: str_key_hashes' loop for one key. pow31[POW31_CACHED - 1 - k] = 31^k. */
static void hash_str_units(int kind, const void *data, Py_ssize_t len, uint32_t h,
                           const uint32_t *pow31, int vector, int64_t *o) {
    switch (kind) {
    case PyUnicode_1BYTE_KIND: {
        const Py_UCS1 *u = (const Py_UCS1 *)data;
        if (len <= POW31_CACHED) {  /* independent products, four sums */
            const uint32_t *w = pow31 + POW31_CACHED - len;
#ifdef HAVE_CLMUL_CRC
            if (avx2_hashes && vector && len) {  /* eight products a step */
                hash_rows_avx2(u, 1, len, w, h * (w[0] * 31u), o);
                return;
            }
#else
            (void)vector;
#endif
            uint32_t a = 0, b = 0, c = 0, d = 0;
            Py_ssize_t j = 0;
            for (; j + 4 <= len; j += 4) {
                a += u[j] * w[j];
                b += u[j + 1] * w[j + 1];
                c += u[j + 2] * w[j + 2];
                d += u[j + 3] * w[j + 3];
            }
            for (; j < len; j++)
                a += u[j] * w[j];
            h = h * (len ? w[0] * 31u : 1u) + a + b + c + d;
            break;
        }
        for (Py_ssize_t j = 0; j < len; j++)
            h = 31u * h + u[j];
        break;
    }
    case PyUnicode_2BYTE_KIND: {
        const Py_UCS2 *u = (const Py_UCS2 *)data;
        for (Py_ssize_t j = 0; j < len; j++)
            h = 31u * h + u[j];
        break;
    }
    default: {
        const Py_UCS4 *u = (const Py_UCS4 *)data;
        for (Py_ssize_t j = 0; j < len; j++) {
            Py_UCS4 c = u[j];
            if (c < 0x10000) {
                h = 31u * h + c;
            } else {
                c -= 0x10000;
                h = 31u * h + (0xD800u + (c >> 10));
                h = 31u * h + (0xDC00u + (c & 0x3FFu));
            }
        }
    }
    }
    *o = index_abs(h);
}

static void pow31_table(uint32_t *pow31) {
    uint32_t power = 1;
    for (Py_ssize_t k = POW31_CACHED - 1; k >= 0; k--, power *= 31u)
        pow31[k] = power;
}

static PyObject *str_key_hashes(PyObject *self, PyObject *args) {
    Py_buffer out, sb, cb;
    PyObject *keys;
    int vector = 1;
    if (!PyArg_ParseTuple(args, "w*O!y*y*|p", &out, &PyList_Type, &keys, &sb, &cb, &vector))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = PyList_GET_SIZE(keys), records = sb.len / 4;
    if (out.len != n * 8 || sb.len % 4 || cb.len != records * 8) {
        PyErr_Format(PyExc_ValueError, "str_key_hashes: %zd keys, %zd bytes of out, %zd of "
                     "seeds and %zd of counts do not agree", n, out.len, sb.len, cb.len);
        goto done;
    }
    /* pow31[POW31_CACHED - 1 - k] = 31^k: a key of len units weighs unit j by
       31^(len-1-j), pow31[POW31_CACHED - len + j] */
    uint32_t pow31[POW31_CACHED];
    pow31_table(pow31);
    const uint32_t *seeds = (const uint32_t *)sb.buf;
    const int64_t *counts = (const int64_t *)cb.buf;
    int64_t *o = (int64_t *)out.buf;
    Py_ssize_t i = 0;
    for (Py_ssize_t r = 0; r < records; r++) {
        if (counts[r] < 0 || counts[r] > n - i) {
            PyErr_Format(PyExc_ValueError, "str_key_hashes: the counts name more than the "
                         "%zd keys", n);
            goto done;
        }
        for (Py_ssize_t end = i + (Py_ssize_t)counts[r]; i < end; i++) {
            PyObject *key = PyList_GET_ITEM(keys, i);
            if (!PyUnicode_Check(key)) {
                PyErr_SetString(PyExc_TypeError, "str_key_hashes: a key is not a str");
                goto done;
            }
            hash_str_units(PyUnicode_KIND(key), PyUnicode_DATA(key), PyUnicode_GET_LENGTH(key),
                           seeds[r], pow31, vector, o + i);
        }
    }
    if (i != n) {
        PyErr_Format(PyExc_ValueError, "str_key_hashes: the counts name %zd of the %zd keys",
                     i, n);
        goto done;
    }
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&out);
    PyBuffer_Release(&sb);
    PyBuffer_Release(&cb);
    return result;
}

/* The words of n bytes (split at spaces, empty ones not counted), eight bytes a step: a
   word starts at each non-space byte after a space or at the start. A space is one byte
   in UTF-8 too, so this counts the words of a UTF-8 text as well. */
/* The set bits of m, which has none but the high bit of a byte: one multiply, where
   __builtin_popcountll is a library call without the popcnt instruction (not in the
   x86-64 baseline this builds for). */
static inline Py_ssize_t high_bits(uint64_t m) {
    return (Py_ssize_t)(((m >> 7) * 0x0101010101010101ULL) >> 56);
}

static Py_ssize_t byte_words(const unsigned char *u, Py_ssize_t n) {
    Py_ssize_t words = 0, i = 0;
    int after_space = 1;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    const uint64_t low7 = 0x7F7F7F7F7F7F7F7FULL, high = 0x8080808080808080ULL;
    const uint64_t spaces = 0x2020202020202020ULL;
    for (; i + 8 <= n; i += 8) {
        uint64_t x;
        memcpy(&x, u + i, 8);
        x ^= spaces;  /* a space becomes a zero byte, its high bit set in sp */
        uint64_t sp = ~(((x & low7) + low7) | x | low7);
        uint64_t before = (sp << 8) | (after_space ? 0x80u : 0u);  /* the byte before's */
        words += high_bits(~sp & high & before);
        after_space = (int)(sp >> 63);
    }
#endif
    for (; i < n; i++) {
        int space = u[i] == ' ';
        words += !space && after_space;
        after_space = space;
    }
    return words;
}

/* word_count(text) -> int

   The words of text (split at spaces, empty ones not counted): the keys of a KEYS text
   (tidemq/store/index_keys.py: py_word_count is the twin); a one-byte text by
   byte_words. */
static PyObject *word_count(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 1 || !PyUnicode_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "word_count(text): one str");
        return NULL;
    }
    PyObject *text = args[0];
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text), words = 0, i = 0;
    int after_space = 1;
    if (kind == PyUnicode_1BYTE_KIND) {
        words = byte_words((const unsigned char *)data, n);
    } else {
        for (; i < n; i++) {
            int space = PyUnicode_READ(kind, data, i) == ' ';
            words += !space && after_space;
            after_space = space;
        }
    }
    return PyLong_FromSsize_t(words);
}

/* record_key_hashes(out, counts, key_sets, seeds, words_type, vector=True) -> written

   str_key_hashes for the key sets of records queued one by one, without a flat list of
   their keys: key_sets[r] is a sequence (a tuple) of str keys, or an object of words_type
   whose `text` attribute holds the keys as words separated by spaces (a trace message's
   hundreds of msgIds, not split into a str each). Empty keys and words are skipped. Each
   key's hash after record r's seed (uint32) goes to out (int64, room for at least the
   keys), and counts[r] (int64) becomes the number written for record r; returns the
   total written (the twin: tidemq/store/index_keys.py, py_record_key_hashes). */
static PyObject *record_key_hashes(PyObject *self, PyObject *args) {
    Py_buffer out, cb, sb;
    PyObject *sets, *words_type;
    int vector = 1;
    if (!PyArg_ParseTuple(args, "w*w*O!y*O|p", &out, &cb, &PyList_Type, &sets, &sb,
                          &words_type, &vector))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t records = PyList_GET_SIZE(sets), room = out.len / 8;
    if (cb.len != records * 8 || sb.len != records * 4) {
        PyErr_Format(PyExc_ValueError, "record_key_hashes: %zd records, %zd bytes of counts "
                     "and %zd of seeds do not agree", records, cb.len, sb.len);
        goto done;
    }
    uint32_t pow31[POW31_CACHED];
    pow31_table(pow31);
    const uint32_t *seeds = (const uint32_t *)sb.buf;
    int64_t *counts = (int64_t *)cb.buf, *o = (int64_t *)out.buf;
    Py_ssize_t written = 0;
    for (Py_ssize_t r = 0; r < records; r++) {
        PyObject *set = PyList_GET_ITEM(sets, r);
        Py_ssize_t before = written;
        if ((PyObject *)Py_TYPE(set) != words_type) {
            PyObject *fast = PySequence_Fast(set, "record_key_hashes: a key set is not a "
                                             "sequence");
            if (fast == NULL)
                goto done;
            Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
            PyObject **items = PySequence_Fast_ITEMS(fast);
            for (Py_ssize_t k = 0; k < n; k++) {
                PyObject *key = items[k];
                if (!PyUnicode_Check(key)) {
                    Py_DECREF(fast);
                    PyErr_SetString(PyExc_TypeError, "record_key_hashes: a key is not a str");
                    goto done;
                }
                Py_ssize_t len = PyUnicode_GET_LENGTH(key);
                if (!len)
                    continue;
                if (written == room) {
                    Py_DECREF(fast);
                    goto full;
                }
                hash_str_units(PyUnicode_KIND(key), PyUnicode_DATA(key), len, seeds[r],
                               pow31, vector, o + written++);
            }
            Py_DECREF(fast);
        } else {
            PyObject *text = PyObject_GetAttrString(set, "text");
            if (text == NULL)
                goto done;
            if (!PyUnicode_Check(text)) {
                Py_DECREF(text);
                PyErr_SetString(PyExc_TypeError, "record_key_hashes: a text is not a str");
                goto done;
            }
            int kind = PyUnicode_KIND(text);
            const char *data = PyUnicode_DATA(text);
            Py_ssize_t len = PyUnicode_GET_LENGTH(text), at = 0;
            while (at < len) {
                Py_ssize_t end = at;
                if (kind == PyUnicode_1BYTE_KIND) {
                    const char *sp = memchr(data + at, ' ', (size_t)(len - at));
                    end = sp ? sp - data : len;
                } else {
                    while (end < len && PyUnicode_READ(kind, data, end) != ' ')
                        end++;
                }
                if (end > at) {
                    if (written == room) {
                        Py_DECREF(text);
                        goto full;
                    }
                    hash_str_units(kind, data + at * kind, end - at, seeds[r], pow31, vector,
                                   o + written++);
                }
                at = end + 1;
            }
            Py_DECREF(text);
        }
        counts[r] = written - before;
    }
    result = PyLong_FromSsize_t(written);
    goto done;
full:
    PyErr_Format(PyExc_ValueError, "record_key_hashes: more keys than the %zd out holds",
                 room);
done:
    PyBuffer_Release(&out);
    PyBuffer_Release(&cb);
    PyBuffer_Release(&sb);
    return result;
}

/* decode_plain_messages(cls, data, pos, out, check_crc, queue_id, broker_name, host_text,
                         lazy_of) -> int

   py_decode_plain_messages of tidemq/formats/record/messages.py, its twin, with the
   message class `cls` (tidemq.types.MessageExt) given first: the plain records of the
   bytes `data` from `pos` become instances of `cls` appended to the list `out`, each
   slot written where the class keeps it; returns where the first record that is not
   plain (V1, IPv4 hosts, neither compressed nor an inner batch) or does not check out
   starts, len(data) when none does. The checks, their order, the calls of host_text and
   lazy_of (once per change of store or born host) and the strings reused from one record
   to the next are the twin's. Unlike the twin's, the messages are not tracked by the
   cycle collector (see below). */
enum {
    S_LAZY, S_MSG_ID, S_PROPERTIES, S_RAW_PROPERTIES, S_BODY, S_BODY_CRC, S_BORN_HOST,
    S_BORN_TIMESTAMP, S_BROKER_NAME, S_COMMIT_LOG_OFFSET, S_FLAG, S_PREPARED, S_QUEUE_ID,
    S_QUEUE_OFFSET, S_RECONSUME_TIMES, S_STORE_HOST, S_STORE_SIZE, S_STORE_TIMESTAMP,
    S_SYS_FLAG, S_TOPIC, N_MESSAGE_SLOTS
};
static const char *const message_slot_names[N_MESSAGE_SLOTS] = {
    "_lazy", "_msg_id", "_properties", "_raw_properties", "body", "body_crc", "born_host",
    "born_timestamp", "broker_name", "commit_log_offset", "flag",
    "prepared_transaction_offset", "queue_id", "queue_offset", "reconsume_times",
    "store_host", "store_size", "store_timestamp", "sys_flag", "topic",
};
/* Where the last class seen keeps each slot; looked up again when the class changes. */
static PyTypeObject *slots_class = NULL;
static unsigned int slots_version = 0;
static Py_ssize_t slot_at[N_MESSAGE_SLOTS];

static int version_valid(PyTypeObject *cls) {
#ifdef Py_TPFLAGS_VALID_VERSION_TAG
    if (!(cls->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG))
        return 0;
#endif
    return cls->tp_version_tag != 0;
}

/* Fill slot_at for `cls`: every name must be a writable object slot (a member
   descriptor of `cls` or a base), else TypeError. */
static int message_slots_of(PyTypeObject *cls) {
    if (cls == slots_class && version_valid(cls) && cls->tp_version_tag == slots_version)
        return 0;
    Py_ssize_t at[N_MESSAGE_SLOTS];
    for (int i = 0; i < N_MESSAGE_SLOTS; i++) {
        PyObject *d = PyObject_GetAttrString((PyObject *)cls, message_slot_names[i]);
        if (d == NULL && !PyErr_ExceptionMatches(PyExc_AttributeError))
            return -1;
        PyErr_Clear();
        int ok = d != NULL && Py_IS_TYPE(d, &PyMemberDescr_Type);
        if (ok) {
            PyMemberDescrObject *m = (PyMemberDescrObject *)d;
            ok = m->d_member->type == T_OBJECT_EX && !(m->d_member->flags & READONLY)
                 && PyType_IsSubtype(cls, m->d_common.d_type);
            at[i] = m->d_member->offset;
        }
        Py_XDECREF(d);
        if (!ok) {
            PyErr_Format(PyExc_TypeError, "decode_plain_messages: %s.%s is not a slot",
                         cls->tp_name, message_slot_names[i]);
            return -1;
        }
    }
    memcpy(slot_at, at, sizeof at);
    Py_INCREF(cls);
    Py_XSETREF(slots_class, cls);
    slots_version = version_valid(cls) ? cls->tp_version_tag : 0;
    return 0;
}

static int64_t get_be64(const unsigned char *p) {
    return (int64_t)(((uint64_t)(uint32_t)get_be32(p) << 32) | (uint32_t)get_be32(p + 4));
}

#define SLOW_SYSFLAGS (0x1 | 0x40 | 0x80 | SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6)
#define MAX_V1_TOPIC_BYTES 127

/* Whether the n bytes at p are UTF-8 (0: not; -1: another error raised). */
static int utf8_ok(const unsigned char *p, Py_ssize_t n) {
    if (is_ascii(p, n))
        return 1;
    PyObject *s = PyUnicode_DecodeUTF8((const char *)p, n, "strict");
    if (s != NULL) {
        Py_DECREF(s);
        return 1;
    }
    if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
        return -1;
    PyErr_Clear();
    return 0;
}

/* Call f(ip, port) for the 8 packed bytes of a host at p: 4-byte IP, signed port. */
static PyObject *call_host(PyObject *f, PyObject *ip, const unsigned char *p) {
    PyObject *port = PyLong_FromLong(get_be32(p + 4));
    if (port == NULL)
        return NULL;
    PyObject *call_args[2] = {ip, port};
    PyObject *r = PyObject_Vectorcall(f, call_args, 2, NULL);
    Py_DECREF(port);
    return r;
}

/* The int of `v`: the one made for the record before when it had the same value (a
   batch's records share their times and often their size), else a new one kept in
   *last for the next record. */
static PyObject *int_as_before(PyObject **last, int64_t *last_value, int64_t v) {
    if (*last == NULL || *last_value != v) {
        PyObject *o = PyLong_FromLongLong(v);
        if (o == NULL)
            return NULL;
        Py_XSETREF(*last, o);
        *last_value = v;
    }
    return Py_NewRef(*last);
}

#define SET_SLOT(msg, slot, value) \
    (*(PyObject **)((char *)(msg) + slot_at[slot]) = (value))

static PyObject *decode_plain_messages(PyObject *self, PyObject *const *args,
                                       Py_ssize_t nargs) {
    if (nargs != 9) {
        PyErr_Format(PyExc_TypeError, "decode_plain_messages takes 9 arguments (%zd given)",
                     nargs);
        return NULL;
    }
    PyObject *cls_obj = args[0], *data = args[1], *out = args[3], *fixed_qid = args[5];
    PyObject *broker_name = args[6], *host_text = args[7], *lazy_of = args[8];
    if (!PyType_Check(cls_obj) || !PyBytes_Check(data) || !PyList_Check(out)) {
        PyErr_SetString(PyExc_TypeError,
                        "decode_plain_messages: a class, bytes and a list come first");
        return NULL;
    }
    PyTypeObject *cls = (PyTypeObject *)cls_obj;
    Py_ssize_t pos = PyLong_AsSsize_t(args[2]);
    if (pos == -1 && PyErr_Occurred())
        return NULL;
    if (pos < 0) {
        PyErr_SetString(PyExc_ValueError, "decode_plain_messages: pos must be >= 0");
        return NULL;
    }
    int check_crc = PyObject_IsTrue(args[4]);
    if (check_crc < 0 || message_slots_of(cls) < 0)
        return NULL;
    const unsigned char *d = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t end = PyBytes_GET_SIZE(data);
    PyObject *topic = NULL, *store_host = NULL, *born_host = NULL, *lazy = NULL;
    const unsigned char *raw_topic = NULL;
    Py_ssize_t raw_topic_len = -1;
    int64_t last_store = 0, last_born = 0;
    int have_store = 0, have_born = 0;
    PyObject *born_ts = NULL, *store_ts = NULL, *size = NULL;
    int64_t born_ts_value = 0, store_ts_value = 0, size_value = 0;
    while (pos < end && end - pos >= OFF_BODY) {
        const unsigned char *r = d + pos;
        int32_t total = get_be32(r), sys_flag = get_be32(r + OFF_SYSFLAG);
        int32_t body_len = get_be32(r + OFF_BODY_LENGTH);
        if (get_be32(r + OFF_MAGIC) != MAGIC_V1 || (sys_flag & SLOW_SYSFLAGS)
                || total < MIN_RECORD_SIZE || total > end - pos || body_len < 0
                || (int64_t)body_len > (int64_t)total - MIN_RECORD_SIZE)
            break;
        Py_ssize_t stop = pos + total, body_end = pos + OFF_BODY + body_len;
        Py_ssize_t topic_len = d[body_end], props_at = body_end + 3 + topic_len;
        if (topic_len > MAX_V1_TOPIC_BYTES || props_at > stop
                || (((Py_ssize_t)d[props_at - 2] << 8) | d[props_at - 1]) != stop - props_at)
            break;
        int32_t crc = get_be32(r + OFF_BODY_CRC);
        if (check_crc && (crc32_body(0, r + OFF_BODY, (size_t)body_len) & 0x7FFFFFFFu)
                         != (uint32_t)crc)
            break;
        if (topic_len != raw_topic_len
                || memcmp(d + body_end + 1, raw_topic, (size_t)topic_len) != 0) {
            raw_topic = d + body_end + 1;
            raw_topic_len = topic_len;
            PyObject *t = PyUnicode_DecodeUTF8((const char *)raw_topic, topic_len, "strict");
            if (t == NULL) {
                if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                    goto error;
                PyErr_Clear();
                break;
            }
            Py_XSETREF(topic, t);
        }
        int ok = utf8_ok(d + props_at, stop - props_at);
        if (ok < 0)
            goto error;
        if (!ok)
            break;
        int64_t store = get_be64(r + OFF_STORE_HOST), born = get_be64(r + OFF_BORN_HOST);
        if (!have_store || store != last_store) {
            PyObject *ip = PyBytes_FromStringAndSize((const char *)r + OFF_STORE_HOST, 4);
            if (ip == NULL)
                goto error;
            PyObject *host = call_host(host_text, ip, r + OFF_STORE_HOST);
            PyObject *pair = host != NULL ? call_host(lazy_of, ip, r + OFF_STORE_HOST) : NULL;
            Py_DECREF(ip);
            if (pair == NULL) {
                Py_XDECREF(host);
                goto error;
            }
            Py_XSETREF(store_host, host);
            Py_XSETREF(lazy, pair);
            last_store = store;
            have_store = 1;
        }
        if (!have_born || born != last_born) {
            PyObject *ip = PyBytes_FromStringAndSize((const char *)r + OFF_BORN_HOST, 4);
            if (ip == NULL)
                goto error;
            PyObject *host = call_host(host_text, ip, r + OFF_BORN_HOST);
            Py_DECREF(ip);
            if (host == NULL)
                goto error;
            Py_XSETREF(born_host, host);
            last_born = born;
            have_born = 1;
        }
        PyObject *msg = cls->tp_alloc(cls, 0);
        if (msg == NULL)
            goto error;
        /* Slots are NULL until set: a message dropped half-made is freed as it is. */
        PyObject *v;
#define SET_NEW(slot, expr) \
        if ((v = (expr)) == NULL) { Py_DECREF(msg); goto error; } SET_SLOT(msg, slot, v)
        SET_SLOT(msg, S_TOPIC, Py_NewRef(topic));
        SET_NEW(S_BODY, PyBytes_FromStringAndSize((const char *)r + OFF_BODY, body_len));
        SET_SLOT(msg, S_PROPERTIES, Py_NewRef(Py_None));
        SET_NEW(S_RAW_PROPERTIES, PyBytes_FromStringAndSize((const char *)d + props_at,
                                                            stop - props_at));
        SET_SLOT(msg, S_MSG_ID, Py_NewRef(Py_None));
        SET_SLOT(msg, S_LAZY, Py_NewRef(lazy));
        if (fixed_qid == Py_None) {
            SET_NEW(S_QUEUE_ID, PyLong_FromLong(get_be32(r + OFF_QUEUE_ID)));
        } else {
            SET_SLOT(msg, S_QUEUE_ID, Py_NewRef(fixed_qid));
        }
        SET_NEW(S_QUEUE_OFFSET, PyLong_FromLongLong(get_be64(r + OFF_QUEUE_OFFSET)));
        SET_NEW(S_COMMIT_LOG_OFFSET, PyLong_FromLongLong(get_be64(r + OFF_PHYSICAL_OFFSET)));
        SET_NEW(S_STORE_SIZE, int_as_before(&size, &size_value, total));
        SET_NEW(S_SYS_FLAG, PyLong_FromLong(sys_flag));
        SET_NEW(S_BORN_TIMESTAMP, int_as_before(&born_ts, &born_ts_value,
                                                get_be64(r + OFF_BORN_TIMESTAMP)));
        SET_SLOT(msg, S_BORN_HOST, Py_NewRef(born_host));
        SET_NEW(S_STORE_TIMESTAMP, int_as_before(&store_ts, &store_ts_value,
                                                 get_be64(r + OFF_STORE_TIMESTAMP)));
        SET_SLOT(msg, S_STORE_HOST, Py_NewRef(store_host));
        SET_NEW(S_RECONSUME_TIMES, PyLong_FromLong(get_be32(r + OFF_RECONSUME_TIMES)));
        SET_NEW(S_FLAG, PyLong_FromLong(get_be32(r + OFF_FLAG)));
        SET_NEW(S_BODY_CRC, PyLong_FromLong(crc));
        SET_NEW(S_PREPARED, PyLong_FromLongLong(get_be64(r + OFF_PREPARED_TX_OFFSET)));
        SET_SLOT(msg, S_BROKER_NAME, Py_NewRef(broker_name));
#undef SET_NEW
        /* It holds strings, bytes, numbers, None and the _lazy pair of a string and a
           dict of strings: no cycle runs through it, so the cycle collector need not scan
           it, and a consumer's collections skip every message it keeps. (Code that
           stores a container referring back to the message in one of its slots, against
           their types, would make a cycle the collector does not free.) */
        PyObject_GC_UnTrack(msg);
        int appended = PyList_Append(out, msg);
        Py_DECREF(msg);
        if (appended < 0)
            goto error;
        pos = stop;
    }
    PyObject *result = PyLong_FromSsize_t(pos);
    goto done;
error:
    result = NULL;
done:
    Py_XDECREF(topic);
    Py_XDECREF(store_host);
    Py_XDECREF(born_host);
    Py_XDECREF(lazy);
    Py_XDECREF(born_ts);
    Py_XDECREF(store_ts);
    Py_XDECREF(size);
    return result;
}

/* uniform_split(data, max_body, column) -> (n, size, blen, ustart, uend, shape, keys) | None

   The split of a client batch body whose entries share one layout, in one pass: None
   unless the first entry is well formed (TOTALSIZE at least ENTRY_OVERHEAD and dividing
   the body, BODYLENGTH in the entry and at most max_body, PROPERTIESLENGTH closing it)
   and uniform_entries holds with ustart:uend the value of the first "UNIQ_KEY\x01" in
   the first entry's properties (up to the next 0x02 or their end; plen:plen without
   one). shape is (properties[:ustart], properties[uend:], plen): what every entry's
   properties are around its UNIQ_KEY value. keys: with column true and a value to read,
   the n values of ustart:uend joined (bytes), else None. */
static PyObject *uniform_split(PyObject *self, PyObject *args) {
    Py_buffer in;
    Py_ssize_t max_body;
    int column;
    if (!PyArg_ParseTuple(args, "y*np", &in, &max_body, &column))
        return NULL;
    const unsigned char *b = (const unsigned char *)in.buf;
    Py_ssize_t n_bytes = in.len;
    PyObject *result = NULL, *shape = NULL, *keys = NULL;
    if (n_bytes < ENTRY_OVERHEAD)
        goto none;
    Py_ssize_t size = get_be32(b + ENTRY_OFF_TOTAL_SIZE);
    Py_ssize_t blen = get_be32(b + ENTRY_OFF_BODY_LENGTH);
    if (size < ENTRY_OVERHEAD || n_bytes % size || blen < 0 || blen > size - ENTRY_OVERHEAD)
        goto none;
    Py_ssize_t pstart = ENTRY_OVERHEAD + blen, plen = size - pstart;
    int16_t plen_field = (int16_t)((b[pstart - 2] << 8) | b[pstart - 1]);
    if (plen_field != plen || blen > max_body)
        goto none;
    Py_ssize_t n = n_bytes / size, ustart = plen, uend = plen;
    const unsigned char *props = b + pstart;
    static const char name[] = "UNIQ_KEY\x01";
    const unsigned char *at = memmem(props, (size_t)plen, name, sizeof(name) - 1);
    if (at != NULL) {
        ustart = at - props + (Py_ssize_t)(sizeof(name) - 1);
        const unsigned char *sep = memchr(props + ustart, 0x02, (size_t)(plen - ustart));
        uend = sep != NULL ? sep - props : plen;
    }
    if (!entries_uniform(b, n, size, pstart, plen, ustart, uend))
        goto none;
    shape = Py_BuildValue("(y#y#n)", (const char *)props, ustart, (const char *)props + uend,
                          plen - uend, plen);
    if (shape == NULL)
        goto done;
    Py_ssize_t w = uend - ustart;
    if (column && w) {
        keys = PyBytes_FromStringAndSize(NULL, n * w);
        if (keys == NULL)
            goto done;
        unsigned char *k = (unsigned char *)PyBytes_AS_STRING(keys);
        const unsigned char *v = props + ustart;
        for (Py_ssize_t i = 0; i < n; i++, k += w, v += size)
            memcpy(k, v, (size_t)w);
    } else {
        keys = Py_NewRef(Py_None);
    }
    result = Py_BuildValue("(nnnnnOO)", n, size, blen, ustart, uend, shape, keys);
    goto done;
none:
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(shape);
    Py_XDECREF(keys);
    PyBuffer_Release(&in);
    return result;
}

/* dict_get_many(d, keys): list(map(d.get, keys)) for a dict d, with the memory reads of
the keys' slots overlapped (twin: tidemq/store/lookups.py).

A lookup in a dict of a million entries misses the CPU's caches three times in a row:
its index slot, its entry, and the stored key it compares. One key at a time those
misses are serial; here, for a window of keys at once, each step reads what it needs
for every key of the window before the next step, in loads that do not depend on one
another, so the CPU overlaps their misses, and the lookups proper, by
PyDict_GetItemWithError, then find their lines in the cache. (Prefetch instructions in
place of the loads gained less than half as much on this kind of machine.) The reads
follow the dict layout CPython 3.11, 3.12 and 3.13 share (with the GIL; a free-threaded
build locks its dicts and is left to the plain lookups); only exact str keys (whose hash
runs no Python code) of a dict whose keys are not split are read ahead, every read stays
inside the arrays the dict's own sizes bound or the header of an object the dict holds,
and nothing read ahead changes a result. DICT_READ_AHEAD, a module constant, says
whether this build reads ahead. */

/* Keys looked up together: their reads in flight at once. */
#define DICT_WINDOW 16

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030E0000 && !defined(Py_GIL_DISABLED)
#define DICT_READ_AHEAD 1
typedef struct {  /* Include/internal/pycore_dict.h, struct _dictkeysobject */
    Py_ssize_t dk_refcnt;
    uint8_t dk_log2_size;
    uint8_t dk_log2_index_bytes;
    uint8_t dk_kind;
    uint32_t dk_version;
    Py_ssize_t dk_usable;
    Py_ssize_t dk_nentries;
    char dk_indices[];
} dict_keys_layout;
typedef struct { PyObject *me_key; PyObject *me_value; } dict_unicode_entry_layout;
typedef struct { Py_hash_t me_hash; PyObject *me_key; PyObject *me_value; } dict_entry_layout;
#define DICT_KEYS_GENERAL 0
#define DICT_KEYS_UNICODE 1

static inline Py_ssize_t dict_index_layout(const dict_keys_layout *k, size_t slot) {
    switch (k->dk_log2_index_bytes - k->dk_log2_size) {
    case 0: return ((const int8_t *)k->dk_indices)[slot];
    case 1: return ((const int16_t *)k->dk_indices)[slot];
    case 2: return ((const int32_t *)k->dk_indices)[slot];
    default: return ((const int64_t *)k->dk_indices)[slot];
    }
}

/* Read the index slots, entries and stored keys' headers of keys[0..n) (exact str,
hashed) into the cache, each step's loads for all keys before the next step's; with
values, the headers of the values they hold too (a store replaces and releases them). */
static void dict_read_ahead(PyDictObject *d, PyObject *const *keys, Py_ssize_t n,
                            int values) {
    const dict_keys_layout *k = (const dict_keys_layout *)d->ma_keys;
    if (d->ma_values != NULL || k->dk_log2_size < 8
            || (k->dk_kind != DICT_KEYS_GENERAL && k->dk_kind != DICT_KEYS_UNICODE))
        return;  /* split, small (in the cache already) or of another kind */
    size_t mask = ((size_t)1 << k->dk_log2_size) - 1;
    const char *entries = k->dk_indices + ((size_t)1 << k->dk_log2_index_bytes);
    size_t entry_size = k->dk_kind == DICT_KEYS_UNICODE ? sizeof(dict_unicode_entry_layout)
                                                        : sizeof(dict_entry_layout);
    size_t key_at = k->dk_kind == DICT_KEYS_UNICODE
                        ? offsetof(dict_unicode_entry_layout, me_key)
                        : offsetof(dict_entry_layout, me_key);
    Py_ssize_t ix[DICT_WINDOW];
    PyObject *stored[DICT_WINDOW];
    for (Py_ssize_t i = 0; i < n; i++)
        ix[i] = dict_index_layout(k, (size_t)((PyASCIIObject *)keys[i])->hash & mask);
    for (Py_ssize_t i = 0; i < n; i++)
        stored[i] = ix[i] >= 0 && ix[i] < k->dk_nentries
                        ? *(PyObject *const *)(entries + (size_t)ix[i] * entry_size + key_at)
                        : NULL;
    Py_ssize_t refs = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (stored[i] != NULL)
            refs += Py_REFCNT(stored[i]);
    if (values) {
        size_t value_at = key_at + sizeof(PyObject *);  /* me_value follows me_key */
        for (Py_ssize_t i = 0; i < n; i++)
            stored[i] = stored[i] != NULL
                            ? *(PyObject *const *)(entries + (size_t)ix[i] * entry_size
                                                   + value_at)
                            : NULL;
        for (Py_ssize_t i = 0; i < n; i++)
            if (stored[i] != NULL)
                refs += Py_REFCNT(stored[i]);
    }
    volatile Py_ssize_t keep = refs;  /* the loads are the point: keep them */
    (void)keep;
}
#endif

/* Hash the exact str keys of keys[0..n) that are not hashed yet; whether every key is
an exact str (the read-ahead takes only those). -1 on an error. */
static int dict_hash_window(PyObject *const *keys, Py_ssize_t n) {
    int all_str = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = keys[i];
        if (!PyUnicode_CheckExact(key))
            all_str = 0;
        else if (((PyASCIIObject *)key)->hash == -1 && PyObject_Hash(key) == -1)
            return -1;
    }
    return all_str;
}

/* Hash a window's keys and read their slots ahead (and the values they hold, for a
store); -1 on an error. */
static int dict_window_ready(PyObject *d, PyObject *const *keys, Py_ssize_t n, int values) {
    int all_str = dict_hash_window(keys, n);
    if (all_str < 0)
        return -1;
#ifdef DICT_READ_AHEAD
    if (all_str && n > 1)
        dict_read_ahead((PyDictObject *)d, keys, n, values);
#else
    (void)d;
    (void)values;
#endif
    return 0;
}

/* The keys are read from a copy (items_of): a key's comparison may run Python code. */
static PyObject *dict_get_many(PyObject *self, PyObject *args) {
    PyObject *d, *keys;
    if (!PyArg_ParseTuple(args, "O!O:dict_get_many", &PyDict_Type, &d, &keys))
        return NULL;
    PyObject *seq = items_of(keys, "dict_get_many: keys must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    PyObject *const *items = (PyObject *const *)&PyTuple_GET_ITEM(seq, 0);
    PyObject *out = PyList_New(n);
    if (out == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    for (Py_ssize_t at = 0; at < n; at += DICT_WINDOW) {
        Py_ssize_t end = at + DICT_WINDOW < n ? at + DICT_WINDOW : n;
        if (dict_window_ready(d, items + at, end - at, 0) < 0)
            goto fail;
        for (Py_ssize_t i = at; i < end; i++) {
            PyObject *value = PyDict_GetItemWithError(d, items[i]);
            if (value == NULL) {
                if (PyErr_Occurred())
                    goto fail;
                value = Py_None;
            }
            Py_INCREF(value);
            PyList_SET_ITEM(out, i, value);
        }
    }
    Py_DECREF(seq);
    return out;
fail:
    Py_DECREF(seq);
    Py_DECREF(out);
    return NULL;
}

/* dict_set_many(d, keys, values[, delta]): d.update(zip(keys, values)) for a dict d and
keys and values of one length, with the memory reads of a window of keys' slots
overlapped as dict_get_many overlaps them, and the values they replace read too: a store
into a dict of a million entries otherwise misses the caches for its index slot, its
entry, the stored key it compares and the old value it releases, one after the other
(twin: tidemq/store/lookups.py). With a delta other than 0 the values are ints and each
is stored plus delta (the next offsets of a fan-out's queues, from those it took). The
keys and values are copied first, so that what a store runs (an old value's finaliser)
cannot change them under the loop. */
static PyObject *dict_set_many(PyObject *self, PyObject *args) {
    PyObject *d, *keys, *values;
    long long delta = 0;
    if (!PyArg_ParseTuple(args, "O!OO|L:dict_set_many", &PyDict_Type, &d, &keys, &values,
                          &delta))
        return NULL;
    PyObject *ks = PySequence_Tuple(keys);
    if (ks == NULL)
        return NULL;
    PyObject *vs = PySequence_Tuple(values);
    if (vs == NULL) {
        Py_DECREF(ks);
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(ks);
    if (PyTuple_GET_SIZE(vs) != n) {
        PyErr_Format(PyExc_ValueError, "dict_set_many: %zd keys but %zd values", n,
                     PyTuple_GET_SIZE(vs));
        goto fail;
    }
    PyObject *const *items = (PyObject *const *)&PyTuple_GET_ITEM(ks, 0);
    for (Py_ssize_t at = 0; at < n; at += DICT_WINDOW) {
        Py_ssize_t end = at + DICT_WINDOW < n ? at + DICT_WINDOW : n;
        if (dict_window_ready(d, items + at, end - at, 1) < 0)
            goto fail;
        for (Py_ssize_t i = at; i < end; i++) {
            PyObject *v = PyTuple_GET_ITEM(vs, i);
            if (delta == 0) {
                if (PyDict_SetItem(d, items[i], v) < 0)
                    goto fail;
                continue;
            }
            if (!PyLong_Check(v)) {
                PyErr_Format(PyExc_TypeError, "dict_set_many: a value plus %lld must be an "
                             "int, not %.100s", delta, Py_TYPE(v)->tp_name);
                goto fail;
            }
            long long x = PyLong_AsLongLong(v), sum;
            if (x == -1 && PyErr_Occurred())
                goto fail;
            if (__builtin_add_overflow(x, delta, &sum)) {
                PyErr_SetString(PyExc_OverflowError, "dict_set_many: a value plus delta "
                                "overflows a 64-bit int");
                goto fail;
            }
            PyObject *next = PyLong_FromLongLong(sum);
            if (next == NULL)
                goto fail;
            int set = PyDict_SetItem(d, items[i], next);
            Py_DECREF(next);
            if (set < 0)
                goto fail;
        }
    }
    Py_DECREF(ks);
    Py_DECREF(vs);
    Py_RETURN_NONE;
fail:
    Py_DECREF(ks);
    Py_DECREF(vs);
    return NULL;
}

/* lmq_entry_keys(names, offsets): the LMQ store's E keys of a dispatch round's entries,
b"E" + UTF-8 name + b"\x00" + the offset as a big-endian int64, in RocksDB's order
(bytewise; entries of equal keys in their given order), and each key's index in the
given order (twin: tidemq/store/lmq_keys.py). */
typedef struct {
    const char *key;
    Py_ssize_t size;
    Py_ssize_t at;
} lmq_key_ref;

static int lmq_key_cmp(const void *a, const void *b) {
    const lmq_key_ref *x = a, *y = b;
    Py_ssize_t n = x->size < y->size ? x->size : y->size;
    int c = memcmp(x->key, y->key, (size_t)n);
    if (c)
        return c;
    if (x->size != y->size)
        return x->size < y->size ? -1 : 1;
    return x->at < y->at ? -1 : (x->at > y->at);
}

static PyObject *lmq_entry_keys(PyObject *self, PyObject *args) {
    PyObject *names_arg, *offsets_arg;
    if (!PyArg_ParseTuple(args, "OO:lmq_entry_keys", &names_arg, &offsets_arg))
        return NULL;
    PyObject *names = items_of(names_arg, "lmq_entry_keys: names must be a sequence");
    if (names == NULL)
        return NULL;
    PyObject *offsets = items_of(offsets_arg, "lmq_entry_keys: offsets must be a sequence");
    if (offsets == NULL) {
        Py_DECREF(names);
        return NULL;
    }
    PyObject *keys = NULL, *sorted_keys = NULL, *order = NULL, *result = NULL;
    lmq_key_ref *refs = NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(names);
    if (PySequence_Fast_GET_SIZE(offsets) != n) {
        PyErr_Format(PyExc_ValueError, "lmq_entry_keys: %zd names but %zd offsets", n,
                     PySequence_Fast_GET_SIZE(offsets));
        goto done;
    }
    keys = PyList_New(n);
    refs = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(lmq_key_ref));
    if (keys == NULL || refs == NULL) {
        if (refs == NULL)
            PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *name = PySequence_Fast_GET_ITEM(names, i);
        if (!PyUnicode_Check(name)) {
            PyErr_SetString(PyExc_TypeError, "lmq_entry_keys: a name is not a str");
            goto done;
        }
        Py_ssize_t len;
        const char *utf8 = PyUnicode_AsUTF8AndSize(name, &len);
        if (utf8 == NULL)
            goto done;
        long long offset = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(offsets, i));
        if (offset == -1 && PyErr_Occurred())
            goto done;
        PyObject *key = PyBytes_FromStringAndSize(NULL, len + 10);
        if (key == NULL)
            goto done;
        char *out = PyBytes_AS_STRING(key);
        out[0] = 'E';
        memcpy(out + 1, utf8, (size_t)len);
        out[len + 1] = 0;
        uint64_t v = (uint64_t)offset;
        for (int b = 0; b < 8; b++)
            out[len + 2 + b] = (char)(v >> (56 - 8 * b));
        PyList_SET_ITEM(keys, i, key);
        refs[i].key = out;
        refs[i].size = len + 10;
        refs[i].at = i;
    }
    qsort(refs, (size_t)n, sizeof(lmq_key_ref), lmq_key_cmp);
    sorted_keys = PyList_New(n);
    order = PyList_New(n);
    if (sorted_keys == NULL || order == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *at = PyLong_FromSsize_t(refs[i].at);
        if (at == NULL)
            goto done;
        PyList_SET_ITEM(order, i, at);
        PyObject *key = PyList_GET_ITEM(keys, refs[i].at);
        Py_INCREF(key);
        PyList_SET_ITEM(sorted_keys, i, key);
    }
    result = PyTuple_Pack(2, sorted_keys, order);
done:
    PyMem_Free(refs);
    Py_XDECREF(keys);
    Py_XDECREF(sorted_keys);
    Py_XDECREF(order);
    Py_DECREF(names);
    Py_DECREF(offsets);
    return result;
}

/* lmq_fanout_runs(names, offsets, values): a dispatch round's LMQ entries as one run
per queue (twin: tidemq/store/lmq_fanout.py). names[i] and offsets[i] are record i's
queues (str) and its offsets in them; values holds every record's entry value, all of
one width, laid end to end. The queues come out in the order of their E keys (bytewise
UTF-8), each queue's entries in the given order; a run ends where the queue changes or
its next offset is not the last one + 1 (64-bit, wrapping as the twin's int64 does).
Returns (keys, runs, queues, firsts, lasts, entries): each run's E key (the queue's
prefix and its first offset, big-endian) and its entries' values joined; each queue
with its first and last offset; the entries in all. */
typedef struct {
    const char *utf8;
    Py_ssize_t size;
    Py_ssize_t at;  /* the queue's number in order of appearance */
} fanout_queue;

static int fanout_queue_cmp(const void *a, const void *b) {
    const fanout_queue *x = a, *y = b;
    Py_ssize_t n = x->size < y->size ? x->size : y->size;
    int c = memcmp(x->utf8, y->utf8, (size_t)n);
    if (c)
        return c;
    return x->size < y->size ? -1 : (x->size > y->size);
}

static PyObject *lmq_fanout_runs(PyObject *self, PyObject *args) {
    PyObject *names_arg, *offsets_arg;
    Py_buffer values;
    if (!PyArg_ParseTuple(args, "OOy*:lmq_fanout_runs", &names_arg, &offsets_arg, &values))
        return NULL;
    PyObject *names = NULL, *offsets = NULL, *seen = NULL, *queues = NULL;
    PyObject **name_rows = NULL, **offset_rows = NULL;
    PyObject *keys = NULL, *runs = NULL, *present = NULL, *firsts = NULL, *lasts = NULL;
    PyObject *result = NULL;
    fanout_queue *qs = NULL;
    Py_ssize_t *e_queue = NULL, *e_record = NULL, *rank = NULL, *start = NULL;
    int64_t *e_offset = NULL;
    Py_ssize_t *s_entry = NULL;
    Py_ssize_t n = 0, total = 0, nq = 0, width = 0;
    names = items_of(names_arg, "lmq_fanout_runs: names must be a sequence");
    if (names == NULL)
        goto done;
    offsets = items_of(offsets_arg, "lmq_fanout_runs: offsets must be a sequence");
    if (offsets == NULL)
        goto done;
    n = PySequence_Fast_GET_SIZE(names);
    if (PySequence_Fast_GET_SIZE(offsets) != n) {
        PyErr_Format(PyExc_ValueError, "%zd records' LMQ names but %zd records' offsets", n,
                     PySequence_Fast_GET_SIZE(offsets));
        goto done;
    }
    if (n && values.len % n) {
        PyErr_Format(PyExc_ValueError, "%zd bytes of values for %zd records", values.len, n);
        goto done;
    }
    width = n ? values.len / n : 0;
    name_rows = PyMem_Calloc((size_t)(n ? n : 1), sizeof(PyObject *));
    offset_rows = PyMem_Calloc((size_t)(n ? n : 1), sizeof(PyObject *));
    if (name_rows == NULL || offset_rows == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        name_rows[i] = items_of(PySequence_Fast_GET_ITEM(names, i),
                                "lmq_fanout_runs: a record's names must be a sequence");
        if (name_rows[i] == NULL)
            goto done;
        offset_rows[i] = items_of(PySequence_Fast_GET_ITEM(offsets, i),
                                  "lmq_fanout_runs: a record's offsets must be a sequence");
        if (offset_rows[i] == NULL)
            goto done;
        Py_ssize_t a = PySequence_Fast_GET_SIZE(name_rows[i]);
        Py_ssize_t b = PySequence_Fast_GET_SIZE(offset_rows[i]);
        if (a != b) {
            PyErr_Format(PyExc_ValueError, "%zd LMQ names but %zd offsets", a, b);
            goto done;
        }
        total += a;
    }
    e_queue = PyMem_Malloc((size_t)(total ? total : 1) * sizeof(Py_ssize_t));
    e_record = PyMem_Malloc((size_t)(total ? total : 1) * sizeof(Py_ssize_t));
    e_offset = PyMem_Malloc((size_t)(total ? total : 1) * sizeof(int64_t));
    seen = PyDict_New();
    queues = PyList_New(0);
    if (e_queue == NULL || e_record == NULL || e_offset == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (seen == NULL || queues == NULL)
        goto done;
    Py_ssize_t e = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t m = PySequence_Fast_GET_SIZE(name_rows[i]);
        for (Py_ssize_t j = 0; j < m; j++, e++) {
            PyObject *name = PySequence_Fast_GET_ITEM(name_rows[i], j);
            if (!PyUnicode_Check(name)) {
                PyErr_SetString(PyExc_TypeError, "lmq_fanout_runs: a name is not a str");
                goto done;
            }
            long long offset = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(offset_rows[i], j));
            if (offset == -1 && PyErr_Occurred())
                goto done;
            PyObject *q = PyDict_GetItemWithError(seen, name);
            Py_ssize_t at;
            if (q != NULL)
                at = PyLong_AsSsize_t(q);
            else {
                if (PyErr_Occurred())
                    goto done;
                at = nq++;
                PyObject *num = PyLong_FromSsize_t(at);
                if (num == NULL)
                    goto done;
                int failed = PyDict_SetItem(seen, name, num) < 0 || PyList_Append(queues, name) < 0;
                Py_DECREF(num);
                if (failed)
                    goto done;
            }
            e_queue[e] = at;
            e_record[e] = i;
            e_offset[e] = (int64_t)offset;
        }
    }
    qs = PyMem_Malloc((size_t)(nq ? nq : 1) * sizeof(fanout_queue));
    rank = PyMem_Malloc((size_t)(nq ? nq : 1) * sizeof(Py_ssize_t));
    start = PyMem_Calloc((size_t)nq + 1, sizeof(Py_ssize_t));
    s_entry = PyMem_Malloc((size_t)(total ? total : 1) * sizeof(Py_ssize_t));
    if (qs == NULL || rank == NULL || start == NULL || s_entry == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t q = 0; q < nq; q++) {
        qs[q].utf8 = PyUnicode_AsUTF8AndSize(PyList_GET_ITEM(queues, q), &qs[q].size);
        if (qs[q].utf8 == NULL)
            goto done;
        qs[q].at = q;
    }
    qsort(qs, (size_t)nq, sizeof(fanout_queue), fanout_queue_cmp);
    for (Py_ssize_t r = 0; r < nq; r++)
        rank[qs[r].at] = r;
    /* entries by queue in key order, each queue's in the given order: a counting sort */
    for (Py_ssize_t k = 0; k < total; k++)
        start[rank[e_queue[k]] + 1]++;
    for (Py_ssize_t r = 0; r < nq; r++)
        start[r + 1] += start[r];
    {
        Py_ssize_t *fill = PyMem_Malloc((size_t)(nq ? nq : 1) * sizeof(Py_ssize_t));
        if (fill == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        memcpy(fill, start, (size_t)nq * sizeof(Py_ssize_t));
        for (Py_ssize_t k = 0; k < total; k++)
            s_entry[fill[rank[e_queue[k]]]++] = k;
        PyMem_Free(fill);
    }
    keys = PyList_New(0);
    runs = PyList_New(0);
    present = PyList_New(nq);
    firsts = PyList_New(nq);
    lasts = PyList_New(nq);
    if (keys == NULL || runs == NULL || present == NULL || firsts == NULL || lasts == NULL)
        goto done;
    const char *vals = values.buf;
    for (Py_ssize_t r = 0; r < nq; r++) {
        const fanout_queue *q = &qs[r];
        Py_ssize_t lo = start[r], hi = start[r + 1];
        PyObject *name = PyList_GET_ITEM(queues, q->at);
        Py_INCREF(name);
        PyList_SET_ITEM(present, r, name);
        PyObject *first = PyLong_FromLongLong(e_offset[s_entry[lo]]);
        if (first == NULL)
            goto done;
        PyList_SET_ITEM(firsts, r, first);
        PyObject *last = PyLong_FromLongLong(e_offset[s_entry[hi - 1]]);
        if (last == NULL)
            goto done;
        PyList_SET_ITEM(lasts, r, last);
        for (Py_ssize_t a = lo; a < hi;) {
            Py_ssize_t b = a + 1;
            while (b < hi && (uint64_t)e_offset[s_entry[b]]
                                 == (uint64_t)e_offset[s_entry[b - 1]] + 1)
                b++;
            PyObject *key = PyBytes_FromStringAndSize(NULL, q->size + 10);
            if (key == NULL)
                goto done;
            char *out = PyBytes_AS_STRING(key);
            out[0] = 'E';
            memcpy(out + 1, q->utf8, (size_t)q->size);
            out[q->size + 1] = 0;
            uint64_t v = (uint64_t)e_offset[s_entry[a]];
            for (int byte = 0; byte < 8; byte++)
                out[q->size + 2 + byte] = (char)(v >> (56 - 8 * byte));
            int failed = PyList_Append(keys, key) < 0;
            Py_DECREF(key);
            if (failed)
                goto done;
            PyObject *run = PyBytes_FromStringAndSize(NULL, (b - a) * width);
            if (run == NULL)
                goto done;
            char *to = PyBytes_AS_STRING(run);
            for (Py_ssize_t k = a; k < b; k++, to += width)
                memcpy(to, vals + e_record[s_entry[k]] * width, (size_t)width);
            failed = PyList_Append(runs, run) < 0;
            Py_DECREF(run);
            if (failed)
                goto done;
            a = b;
        }
    }
    result = Py_BuildValue("(OOOOOn)", keys, runs, present, firsts, lasts, total);
done:
    PyBuffer_Release(&values);
    if (name_rows != NULL)
        for (Py_ssize_t i = 0; i < n; i++)
            Py_XDECREF(name_rows[i]);
    if (offset_rows != NULL)
        for (Py_ssize_t i = 0; i < n; i++)
            Py_XDECREF(offset_rows[i]);
    PyMem_Free(name_rows);
    PyMem_Free(offset_rows);
    PyMem_Free(e_queue);
    PyMem_Free(e_record);
    PyMem_Free(e_offset);
    PyMem_Free(qs);
    PyMem_Free(rank);
    PyMem_Free(start);
    PyMem_Free(s_entry);
    Py_XDECREF(names);
    Py_XDECREF(offsets);
    Py_XDECREF(seen);
    Py_XDECREF(queues);
    Py_XDECREF(keys);
    Py_XDECREF(runs);
    Py_XDECREF(present);
    Py_XDECREF(firsts);
    Py_XDECREF(lasts);
    return result;
}

/* x in decimal at p, a sign and 20 digits at most: returns the end. */
static char *put_decimal(char *p, long long x) {
    char digits[20];
    unsigned long long u = x < 0 ? 0ULL - (unsigned long long)x : (unsigned long long)x;
    int d = 0;
    do {
        digits[d++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (x < 0)
        *p++ = '-';
    while (d)
        *p++ = digits[--d];
    return p;
}

/* lmq_offset_props(targets, props, offsets, head): a fan-out batch's stored properties
and its fan-outs for the dispatcher, once the batch's LMQ offsets are assigned (twin:
tidemq/store/lmq_props.py). targets[i] names message i's LMQs, props[i] (bytes) is its
properties, offsets (integers within 64 bits: ints, or what has __index__) are every
target's offset laid end to end. A message naming LMQs stores props[i] + head + its
offsets in decimal, comma-separated, + b"\x02", and fans out as (its names, its
offsets), two tuples; one naming none stores props[i] as it is and fans out as None.
Every list is read from a tuple copy: an offset's __index__ may change the list. */
static PyObject *lmq_offset_props(PyObject *self, PyObject *args) {
    PyObject *targets_arg, *props_arg, *offsets_arg;
    const char *head;
    Py_ssize_t head_len;
    if (!PyArg_ParseTuple(args, "OOOy#:lmq_offset_props", &targets_arg, &props_arg,
                          &offsets_arg, &head, &head_len))
        return NULL;
    PyObject *targets = NULL, *props = NULL, *offsets = NULL, *names = NULL;
    PyObject *stored = NULL, *fan = NULL, *result = NULL;
    char *buf = NULL;
    Py_ssize_t cap = 0;
    targets = items_of(targets_arg, "lmq_offset_props: targets must be a sequence");
    if (targets == NULL)
        goto done;
    props = items_of(props_arg, "lmq_offset_props: props must be a sequence");
    if (props == NULL)
        goto done;
    offsets = items_of(offsets_arg, "lmq_offset_props: offsets must be a sequence");
    if (offsets == NULL)
        goto done;
    Py_ssize_t n = PyTuple_GET_SIZE(targets), m = PyTuple_GET_SIZE(offsets);
    if (PyTuple_GET_SIZE(props) != n) {
        PyErr_Format(PyExc_ValueError, "lmq_offset_props: %zd target lists but %zd properties",
                     n, PyTuple_GET_SIZE(props));
        goto done;
    }
    names = PyTuple_New(n);
    if (names == NULL)
        goto done;
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = items_of(PyTuple_GET_ITEM(targets, i),
                               "lmq_offset_props: a target list is not a sequence");
        if (t == NULL)
            goto done;
        PyTuple_SET_ITEM(names, i, t);
        total += PyTuple_GET_SIZE(t);
    }
    if (total != m) {
        PyErr_Format(PyExc_ValueError, "lmq_offset_props: %zd LMQ targets but %zd offsets",
                     total, m);
        goto done;
    }
    stored = PyList_New(n);
    fan = PyList_New(n);
    if (stored == NULL || fan == NULL)
        goto done;
    Py_ssize_t at = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *raw = PyTuple_GET_ITEM(props, i), *mine = PyTuple_GET_ITEM(names, i);
        if (!PyBytes_Check(raw)) {
            PyErr_SetString(PyExc_TypeError, "lmq_offset_props: properties are not bytes");
            goto done;
        }
        Py_ssize_t k = PyTuple_GET_SIZE(mine), raw_len = PyBytes_GET_SIZE(raw);
        if (k == 0) {
            Py_INCREF(raw);
            PyList_SET_ITEM(stored, i, raw);
            Py_INCREF(Py_None);
            PyList_SET_ITEM(fan, i, Py_None);
            continue;
        }
        Py_ssize_t need = raw_len + head_len + k * 21 + 1;  /* 20 digits and a sign or comma */
        if (need > cap) {
            PyMem_Free(buf);
            cap = need * 2;
            buf = PyMem_Malloc((size_t)cap);
            if (buf == NULL) {
                PyErr_NoMemory();
                goto done;
            }
        }
        char *p = buf;
        memcpy(p, PyBytes_AS_STRING(raw), (size_t)raw_len);
        p += raw_len;
        memcpy(p, head, (size_t)head_len);
        p += head_len;
        for (Py_ssize_t j = 0; j < k; j++) {
            long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(offsets, at + j));
            if (v == -1 && PyErr_Occurred())
                goto done;
            if (j)
                *p++ = ',';
            p = put_decimal(p, v);
        }
        *p++ = 0x02;
        PyObject *full = PyBytes_FromStringAndSize(buf, p - buf);
        if (full == NULL)
            goto done;
        PyList_SET_ITEM(stored, i, full);
        PyObject *offs = PyTuple_GetSlice(offsets, at, at + k);
        if (offs == NULL)
            goto done;
        PyObject *pair = PyTuple_Pack(2, mine, offs);
        Py_DECREF(offs);
        if (pair == NULL)
            goto done;
        PyList_SET_ITEM(fan, i, pair);
        at += k;
    }
    result = PyTuple_Pack(2, stored, fan);
done:
    PyMem_Free(buf);
    Py_XDECREF(targets);
    Py_XDECREF(props);
    Py_XDECREF(offsets);
    Py_XDECREF(names);
    Py_XDECREF(stored);
    Py_XDECREF(fan);
    return result;
}

/* json_header(code, opaque, flag, language, version, remark, ext, plain)

   A remoting command's JSON header, the bytes tidemq/codec/header.py's msgspec encoder
   writes: the members in sorted order -- code, extFields (when ext is not empty), flag,
   language, opaque, remark (when not None), serializeTypeCurrentRPC ("JSON"), version --
   without spaces, extFields' keys sorted, each string as UTF-8 with '"', '\\' and the
   control characters below 0x20 escaped as msgspec escapes them. None, for the twin to
   encode or to say what is wrong, when a number is not an int within 32 bits (a bool
   neither), language or a key is not a str, remark is neither None nor a str, ext is not
   a dict, a value is neither a str nor of type `plain` (PlainText, a str that needs no
   escape, written as it is as the twin writes it), or a string does not encode as UTF-8.
   The twin: py_encode_json of tidemq/codec/header.py.

   json_header(..., plain, body_len): the frame's head instead -- the length field
   (4 + header + body_len) and the header word (serialization JSON, the header's length),
   both big-endian, then the header -- as tidemq/codec/frame.py's encode_command writes
   it; None as above, and also when body_len is not an int from 0 or the frame does not
   fit its fields. */

typedef struct {
    char *p;
    Py_ssize_t n, cap;
    char stack[768];
} json_buf;

static int jb_grow(json_buf *b, Py_ssize_t more);

static inline int jb_reserve(json_buf *b, Py_ssize_t more) {
    return b->n + more <= b->cap ? 1 : jb_grow(b, more);
}

static int jb_grow(json_buf *b, Py_ssize_t more) {
    Py_ssize_t cap = b->cap * 2;
    while (cap < b->n + more)
        cap *= 2;
    char *p = PyMem_Malloc((size_t)cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return 0;
    }
    memcpy(p, b->p, (size_t)b->n);
    if (b->p != b->stack)
        PyMem_Free(b->p);
    b->p = p;
    b->cap = cap;
    return 1;
}

static inline int jb_raw(json_buf *b, const char *s, Py_ssize_t n) {
    if (!jb_reserve(b, n))
        return 0;
    memcpy(b->p + b->n, s, (size_t)n);
    b->n += n;
    return 1;
}

#define JB_LIT(b, s) jb_raw((b), (s), (Py_ssize_t)sizeof(s) - 1)

/* Whether any of the eight bytes of w is below 0x20, a '"' or a '\\'. */
static inline int json_word_escapes(uint64_t w) {
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    uint64_t quote = w ^ (ones * '"'), slash = w ^ (ones * '\\');
    return (((w - ones * 0x20) & ~w) | ((quote - ones) & ~quote)
            | ((slash - ones) & ~slash)) & highs ? 1 : 0;
}

/* s's UTF-8 text in *u, *n bytes long: 1; 0 with no exception set when s does not
   encode (a lone surrogate); -1 on another failure, with its exception. */
static int utf8_of(PyObject *s, const char **u, Py_ssize_t *n) {
    *u = PyUnicode_AsUTF8AndSize(s, n);
    if (*u != NULL)
        return 1;
    if (PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) {
        PyErr_Clear();
        return 0;
    }
    return -1;
}

/* The string between quotes, escaped; 0 with no exception set when it is not UTF-8
   encodable (a lone surrogate), -1 on a failure with one. */
static int jb_str(json_buf *b, PyObject *s) {
    Py_ssize_t n;
    const char *u;
    int encoded = utf8_of(s, &u, &n);
    if (encoded <= 0)
        return encoded;
    if (!jb_reserve(b, 6 * n + 2))  /* every byte escaped at worst: \u00XX */
        return -1;
    char *o = b->p + b->n;
    *o++ = '"';
    Py_ssize_t i = 0, clean = 0;  /* clean: where the bytes not yet copied start */
    for (;;) {
        /* the usual bytes need no escape: checked eight a step, also after an escape
           (a property text escapes a separator every few bytes, then none for long) */
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, u + i, 8);
            if (json_word_escapes(w))
                break;
            i += 8;
        }
        while (i < n) {
            unsigned char c = (unsigned char)u[i];
            if (c < 0x20 || c == '"' || c == '\\')
                break;
            i++;
        }
        memcpy(o, u + clean, (size_t)(i - clean));
        o += i - clean;
        if (i == n)
            break;
        unsigned char c = (unsigned char)u[i++];
        clean = i;
        *o++ = '\\';
        switch (c) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '\b': *o++ = 'b'; break;
        case '\t': *o++ = 't'; break;
        case '\n': *o++ = 'n'; break;
        case '\f': *o++ = 'f'; break;
        case '\r': *o++ = 'r'; break;
        default:
            *o++ = 'u';
            *o++ = '0';
            *o++ = '0';
            *o++ = "0123456789abcdef"[c >> 4];
            *o++ = "0123456789abcdef"[c & 15];
        }
    }
    *o++ = '"';
    b->n = o - b->p;
    return 1;
}

/* A PlainText value between quotes as it is: whoever made it vouches that it holds
   nothing to escape (the twin writes it so too). Returns as jb_str. */
static int jb_plain(json_buf *b, PyObject *s) {
    Py_ssize_t n;
    const char *u;
    int encoded = utf8_of(s, &u, &n);
    if (encoded <= 0)
        return encoded;
    if (!jb_reserve(b, n + 2))
        return -1;
    char *o = b->p + b->n;
    *o++ = '"';
    memcpy(o, u, (size_t)n);
    o[n] = '"';
    b->n += n + 2;
    return 1;
}

/* An int within 32 bits (not a bool): 1 and its value, else 0 (no exception). */
static int int32_of(PyObject *v, long *out) {
    if (!PyLong_Check(v) || PyBool_Check(v))
        return 0;
    int overflow;
    long x = PyLong_AsLongAndOverflow(v, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    if (x < INT32_MIN || x > INT32_MAX)
        return 0;
    *out = x;
    return 1;
}

static int jb_int(json_buf *b, long x) {
    char digits[21];
    return jb_raw(b, digits, put_decimal(digits, x) - digits);
}

typedef struct {
    const char *u;
    Py_ssize_t n;
    PyObject *key, *value;
} json_member;

static int json_member_cmp(const void *a, const void *b) {
    const json_member *x = a, *y = b;
    Py_ssize_t n = x->n < y->n ? x->n : y->n;
    int c = memcmp(x->u, y->u, (size_t)n);  /* UTF-8 bytes sort as code points do */
    if (c)
        return c;
    return (x->n > y->n) - (x->n < y->n);
}

static PyObject *json_header(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8 && nargs != 9) {
        PyErr_Format(PyExc_TypeError, "json_header takes 8 or 9 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *language = args[3], *remark = args[5], *ext = args[6], *plain = args[7];
    long code, opaque, flag, version;
    if (!int32_of(args[0], &code) || !int32_of(args[1], &opaque) || !int32_of(args[2], &flag)
            || !int32_of(args[4], &version) || !PyUnicode_CheckExact(language)
            || (remark != Py_None && !PyUnicode_CheckExact(remark)) || !PyDict_CheckExact(ext))
        Py_RETURN_NONE;
    /* the frame's head: the length field and the header word go before the header */
    Py_ssize_t body_len = 0, prefix = 0;
    if (nargs == 9) {
        if (!PyLong_CheckExact(args[8]))
            Py_RETURN_NONE;
        int overflow;
        long long n = PyLong_AsLongLongAndOverflow(args[8], &overflow);
        if (overflow || n < 0 || n > 0x7FFFFFFF)
            Py_RETURN_NONE;
        body_len = (Py_ssize_t)n;
        prefix = 8;
    }
    Py_ssize_t count = PyDict_GET_SIZE(ext);
    json_member few[16];
    json_member *members = few;
    if (count > 16) {
        members = PyMem_Malloc(sizeof(json_member) * (size_t)count);
        if (members == NULL)
            return PyErr_NoMemory();
    }
    PyObject *result = NULL;
    json_buf b;
    b.p = b.stack;
    b.n = 0;
    b.cap = (Py_ssize_t)sizeof b.stack;
    b.n = prefix;
    Py_ssize_t pos = 0, i = 0;
    PyObject *key, *value;
    while (PyDict_Next(ext, &pos, &key, &value)) {
        if (!PyUnicode_CheckExact(key) || !(PyUnicode_CheckExact(value)
                                           || (PyObject *)Py_TYPE(value) == plain))
            goto none;
        members[i].u = PyUnicode_AsUTF8AndSize(key, &members[i].n);
        if (members[i].u == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
                goto done;
            PyErr_Clear();
            goto none;
        }
        members[i].key = key;
        members[i].value = value;
        i++;
    }
    for (Py_ssize_t k = 1; k < count; k++) {  /* insertion sort: a header has a few */
        json_member m = members[k];
        Py_ssize_t j = k;
        for (; j > 0 && json_member_cmp(&members[j - 1], &m) > 0; j--)
            members[j] = members[j - 1];
        members[j] = m;
    }
    int ok;
    if (!JB_LIT(&b, "{\"code\":") || !jb_int(&b, code))
        goto done;
    if (count) {
        if (!JB_LIT(&b, ",\"extFields\":{"))
            goto done;
        for (i = 0; i < count; i++) {
            if (i && !JB_LIT(&b, ","))
                goto done;
            ok = jb_str(&b, members[i].key);
            if (ok <= 0)
                goto fail_or_none;
            if (!JB_LIT(&b, ":"))
                goto done;
            ok = (PyObject *)Py_TYPE(members[i].value) == plain
                 ? jb_plain(&b, members[i].value) : jb_str(&b, members[i].value);
            if (ok <= 0)
                goto fail_or_none;
        }
        if (!JB_LIT(&b, "}"))
            goto done;
    }
    if (!JB_LIT(&b, ",\"flag\":") || !jb_int(&b, flag) || !JB_LIT(&b, ",\"language\":"))
        goto done;
    ok = jb_str(&b, language);
    if (ok <= 0)
        goto fail_or_none;
    if (!JB_LIT(&b, ",\"opaque\":") || !jb_int(&b, opaque))
        goto done;
    if (remark != Py_None) {
        if (!JB_LIT(&b, ",\"remark\":"))
            goto done;
        ok = jb_str(&b, remark);
        if (ok <= 0)
            goto fail_or_none;
    }
    if (!JB_LIT(&b, ",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":")
            || !jb_int(&b, version) || !JB_LIT(&b, "}"))
        goto done;
    if (prefix) {
        Py_ssize_t hlen = b.n - prefix;
        if (hlen > 0xFFFFFF || 4 + hlen + body_len > 0x7FFFFFFF)
            goto none;
        uint32_t length = (uint32_t)(4 + hlen + body_len), word = (uint32_t)hlen;
        unsigned char *h = (unsigned char *)b.p;
        h[0] = (unsigned char)(length >> 24); h[1] = (unsigned char)(length >> 16);
        h[2] = (unsigned char)(length >> 8); h[3] = (unsigned char)length;
        h[4] = (unsigned char)(word >> 24); h[5] = (unsigned char)(word >> 16);
        h[6] = (unsigned char)(word >> 8); h[7] = (unsigned char)word;
    }
    result = PyBytes_FromStringAndSize(b.p, b.n);
    goto done;
fail_or_none:
    if (ok < 0)
        goto done;
none:
    result = Py_None;
    Py_INCREF(result);
done:
    if (b.p != b.stack)
        PyMem_Free(b.p);
    if (members != few)
        PyMem_Free(members);
    return result;
}

/* trace_pub_run(mid, between, ids, offsets) -> (text, count, id_width, offset_width)

   The Pub records of a batch whose messages share every field but their msgId and
   offsetMsgId, as one text: ids and offsets are those ids joined by commas (the same
   number of each), record i is ids[i] + mid + offsets[i], and the records are joined by
   between (tidemq/codec/trace_text.py: pub_run is the twin); count is the number of
   records. id_width and offset_width are the one width in characters of every id and
   every offset id, -1 when they differ or are not ASCII. A 0x01 or 0x02 in an id is a
   ValueError (the record could not be read back), as is a count of offsets other than
   the ids'. */
static int trace_utf8(PyObject *text, const char **p, Py_ssize_t *n) {
    *p = PyUnicode_AsUTF8AndSize(text, n);
    return *p == NULL ? -1 : 0;
}

static Py_ssize_t trace_part_width(const char *s, Py_ssize_t n, Py_ssize_t *parts) {
    /* the parts of s split at commas (counted in one pass); their one width, or -1 */
    Py_ssize_t commas = 0, i = 0;
    const uint64_t low7 = 0x7F7F7F7F7F7F7F7FULL, each = 0x0101010101010101ULL;
    for (; i + 8 <= n; i += 8) {  /* eight bytes a step: each comma becomes a zero byte */
        uint64_t x;
        memcpy(&x, s + i, 8);
        x ^= each * ',';
        commas += high_bits(~(((x & low7) + low7) | x | low7));
    }
    for (; i < n; i++)
        commas += s[i] == ',';
    *parts = commas + 1;
    const char *first = memchr(s, ',', (size_t)n);
    Py_ssize_t width = first ? first - s : n;
    if (n != *parts * width + commas)
        return -1;
    for (Py_ssize_t at = width; at < n; at += width + 1)
        if (s[at] != ',')
            return -1;
    return width;
}

static PyObject *trace_pub_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !PyUnicode_Check(args[0]) || !PyUnicode_Check(args[1])
            || !PyUnicode_Check(args[2]) || !PyUnicode_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "trace_pub_run(mid, between, ids, offsets): four str");
        return NULL;
    }
    const char *mid, *between, *ids, *offs;
    Py_ssize_t mlen, blen, ilen, olen;
    if (trace_utf8(args[0], &mid, &mlen) < 0 || trace_utf8(args[1], &between, &blen) < 0
            || trace_utf8(args[2], &ids, &ilen) < 0 || trace_utf8(args[3], &offs, &olen) < 0)
        return NULL;
    if (memchr(ids, 1, (size_t)ilen) || memchr(ids, 2, (size_t)ilen)
            || memchr(offs, 1, (size_t)olen) || memchr(offs, 2, (size_t)olen)) {
        PyErr_SetString(PyExc_ValueError, "a trace field may not contain 0x01 or 0x02");
        return NULL;
    }
    Py_ssize_t n, n_offs;
    Py_ssize_t id_width = trace_part_width(ids, ilen, &n);
    Py_ssize_t count = n;
    Py_ssize_t off_width = trace_part_width(offs, olen, &n_offs);
    if (n != n_offs) {
        PyErr_Format(PyExc_ValueError, "trace_pub_run: %zd ids and %zd offset ids", n, n_offs);
        return NULL;
    }

    /* the commas dropped, mid once a record, between once between two */
    Py_ssize_t size = (ilen - (n - 1)) + (olen - (n - 1)) + n * mlen + (n - 1) * blen;
    int ascii = PyUnicode_IS_ASCII(args[0]) && PyUnicode_IS_ASCII(args[1])
                && PyUnicode_IS_ASCII(args[2]) && PyUnicode_IS_ASCII(args[3]);
    PyObject *text = NULL;
    char *out;
    if (ascii) {
        text = PyUnicode_New(size, 127);
        if (text == NULL)
            return NULL;
        out = (char *)PyUnicode_1BYTE_DATA(text);
    } else {
        out = PyMem_Malloc(size ? (size_t)size : 1);
        if (out == NULL)
            return PyErr_NoMemory();
    }
    char *w = out;
    const char *ia = ids, *iend = ids + ilen, *oa = offs, *oend = offs + olen;
    if (id_width >= 0 && off_width >= 0) {  /* parts of one width: no search */
        for (Py_ssize_t i = 0; i < n; i++) {
            if (i) {
                memcpy(w, between, (size_t)blen);
                w += blen;
            }
            memcpy(w, ia, (size_t)id_width);
            w += id_width;
            memcpy(w, mid, (size_t)mlen);
            w += mlen;
            memcpy(w, oa, (size_t)off_width);
            w += off_width;
            ia += id_width + 1;
            oa += off_width + 1;
        }
        n = 0;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *ic = memchr(ia, ',', (size_t)(iend - ia));
        const char *oc = memchr(oa, ',', (size_t)(oend - oa));
        const char *ie = ic ? ic : iend, *oe = oc ? oc : oend;
        if (i) {
            memcpy(w, between, (size_t)blen);
            w += blen;
        }
        memcpy(w, ia, (size_t)(ie - ia));
        w += ie - ia;
        memcpy(w, mid, (size_t)mlen);
        w += mlen;
        memcpy(w, oa, (size_t)(oe - oa));
        w += oe - oa;
        ia = ie + 1;
        oa = oe + 1;
    }
    if (!PyUnicode_IS_ASCII(args[2]))
        id_width = -1;  /* a width in characters, not bytes */
    if (!PyUnicode_IS_ASCII(args[3]))
        off_width = -1;
    if (!ascii) {
        text = PyUnicode_DecodeUTF8(out, size, "strict");
        PyMem_Free(out);
        if (text == NULL)
            return NULL;
    }
    return Py_BuildValue("(Nnnn)", text, count, id_width, off_width);
}

/* unique_words(text) -> str

   The words of text (split at spaces, empty ones dropped), each once, in the order of
   their first appearance, joined by spaces: a trace message's KEYS from the keys of its
   records (tidemq/codec/trace_text.py: unique_words is the twin). Words compared as
   their UTF-8 bytes, kept in an open-addressing table of their positions. */
static uint64_t trace_word_hash(const unsigned char *s, Py_ssize_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, s + i, 8);
        h = (h ^ v) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
    }
    uint64_t tail = 0;
    for (int k = 0; i < n; i++, k += 8)
        tail |= (uint64_t)s[i] << k;
    h = (h ^ tail) * 0xC4CEB9FE1A85EC53ull;
    return h ^ (h >> 29);
}

static PyObject *unique_words(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 1 || !PyUnicode_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "unique_words(text): one str");
        return NULL;
    }
    const char *s;
    Py_ssize_t len;
    if (trace_utf8(args[0], &s, &len) < 0)
        return NULL;
    Py_ssize_t cap = 16;
    for (Py_ssize_t words = byte_words((const unsigned char *)s, len); cap < 2 * words; )
        cap <<= 1;  /* a table at most half full, sized by the words, not the bytes */
    Py_ssize_t *table = PyMem_Malloc((size_t)cap * 2 * sizeof(Py_ssize_t));
    char *out = PyMem_Malloc(len ? (size_t)len : 1);
    PyObject *result = NULL;
    if (table == NULL || out == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < cap; i++)
        table[2 * i] = -1;  /* start (in out) and length of the word in slot i */
    Py_ssize_t w = 0;
    const char *at = s, *end = s + len;
    while (at < end) {
        const char *space = memchr(at, ' ', (size_t)(end - at));
        const char *we = space ? space : end;
        Py_ssize_t n = we - at;
        if (n) {
            size_t slot = (size_t)trace_word_hash((const unsigned char *)at, n) & (size_t)(cap - 1);
            for (;;) {
                Py_ssize_t start = table[2 * slot];
                if (start < 0) {
                    if (w)
                        out[w++] = ' ';
                    table[2 * slot] = w;
                    table[2 * slot + 1] = n;
                    memcpy(out + w, at, (size_t)n);
                    w += n;
                    break;
                }
                if (table[2 * slot + 1] == n && memcmp(out + start, at, (size_t)n) == 0)
                    break;
                slot = (slot + 1) & (size_t)(cap - 1);
            }
        }
        if (space == NULL)
            break;
        at = space + 1;
    }
    if (PyUnicode_IS_ASCII(args[0])) {
        result = PyUnicode_New(w, 127);
        if (result != NULL)
            memcpy(PyUnicode_1BYTE_DATA(result), out, (size_t)w);
    } else {
        result = PyUnicode_DecodeUTF8(out, w, "strict");
    }
done:
    PyMem_Free(table);
    PyMem_Free(out);
    return result;
}

/* offset_entries_json(table, keys, start, stop, item_sep, key_sep): the members of the
   committed offsets' JSON map (table: dict of str -> dict of int -> int) for the keys
   keys[start:stop] that table holds, in that order, each "key"<key_sep>{"queue"<key_sep>
   offset, ...} (its queues in the dict's order), joined by item_sep: the bytes of
   json.dumps(...) between its braces (twin: tidemq/broker/offset_json.py's
   py_offset_entries). None, with no exception, when a key is not printable ASCII without
   a quote or a backslash, a queue map is not a dict, or a queue id or an offset is not an
   int (a bool neither) within 64 bits: the twin encodes such a slice. The table is read
   under the GIL, one slice a call: a caller on a thread bounds how long it holds it. */
static int printable_key(const char *u, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)u[i];
        if (c < 0x20 || c > 0x7e || c == '"' || c == '\\')
            return 0;
    }
    return 1;
}

static int int64_of(PyObject *v, long long *out) {
    if (!PyLong_CheckExact(v))
        return 0;
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    *out = x;
    return 1;
}

static PyObject *offset_entries_json(PyObject *self, PyObject *const *args,
                                     Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "offset_entries_json takes 6 arguments (%zd given)",
                     nargs);
        return NULL;
    }
    PyObject *table = args[0], *keys = args[1];
    if (!PyDict_Check(table) || !PyList_Check(keys) || !PyBytes_Check(args[4])
            || !PyBytes_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError,
                        "offset_entries_json takes a dict, a list, two ints and two bytes");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[2]), stop = PyLong_AsSsize_t(args[3]);
    if ((start == -1 || stop == -1) && PyErr_Occurred())
        return NULL;
    const char *item_sep = PyBytes_AS_STRING(args[4]), *key_sep = PyBytes_AS_STRING(args[5]);
    Py_ssize_t item_n = PyBytes_GET_SIZE(args[4]), key_n = PyBytes_GET_SIZE(args[5]);
    if (start < 0)
        start = 0;
    json_buf b = {.p = NULL, .n = 0, .cap = sizeof b.stack};
    b.p = b.stack;
    PyObject *result = NULL;
    int first = 1, declined = 0;
    /* The list's length is read again each step and the key held: a lookup may run a
       stored key's __eq__, which may change the list. */
    for (Py_ssize_t i = start; i < stop && i < PyList_GET_SIZE(keys) && !declined; i++) {
        PyObject *key = PyList_GET_ITEM(keys, i);
        if (!PyUnicode_CheckExact(key) || !PyUnicode_IS_ASCII(key)) {
            declined = 1;
            break;
        }
        Py_INCREF(key);
        PyObject *queues = PyDict_GetItemWithError(table, key);
        if (queues == NULL) {
            Py_DECREF(key);
            if (PyErr_Occurred())
                goto done;
            continue;  /* deleted since the keys were listed */
        }
        if (!PyDict_CheckExact(queues)) {
            Py_DECREF(key);
            declined = 1;
            break;
        }
        const char *u = (const char *)PyUnicode_DATA(key);
        Py_ssize_t n = PyUnicode_GET_LENGTH(key);
        if (!printable_key(u, n)) {
            Py_DECREF(key);
            declined = 1;
            break;
        }
        if (!jb_reserve(&b, item_n + n + 2 + key_n + 1)) {
            Py_DECREF(key);
            goto done;
        }
        if (!first) {
            memcpy(b.p + b.n, item_sep, (size_t)item_n);
            b.n += item_n;
        }
        first = 0;
        char *o = b.p + b.n;
        *o++ = '"';
        memcpy(o, u, (size_t)n);
        o += n;
        *o++ = '"';
        memcpy(o, key_sep, (size_t)key_n);
        o += key_n;
        *o++ = '{';
        b.n = o - b.p;
        Py_DECREF(key);  /* written; the queues are read without running Python code */
        Py_ssize_t pos = 0;
        PyObject *q, *off;
        int inner_first = 1;
        while (PyDict_Next(queues, &pos, &q, &off)) {
            long long qv, ov;
            if (!int64_of(q, &qv) || !int64_of(off, &ov)) {
                declined = 1;
                break;
            }
            if (!jb_reserve(&b, item_n + 22 + key_n + 21))
                goto done;
            o = b.p + b.n;
            if (!inner_first) {
                memcpy(o, item_sep, (size_t)item_n);
                o += item_n;
            }
            inner_first = 0;
            *o++ = '"';
            o = put_decimal(o, qv);
            *o++ = '"';
            memcpy(o, key_sep, (size_t)key_n);
            o += key_n;
            o = put_decimal(o, ov);
            b.n = o - b.p;
        }
        if (!declined && !JB_LIT(&b, "}"))
            goto done;
    }
    if (declined) {
        result = Py_None;
        Py_INCREF(result);
    }
    else
        result = PyBytes_FromStringAndSize(b.p, b.n);
done:
    if (b.p != b.stack)
        PyMem_Free(b.p);
    return result;
}

/* lowest_offsets(table, keys, start, stop, out, topics): for the keys keys[start:stop]
   (as Python slices) that table (dict of "topic@group" -> dict of queue id -> offset)
   holds, each queue's lowest offset into out (dict of (topic, queue id) -> offset),
   lowered where it holds a higher one: retention's lowest committed offset per queue
   across groups (twin: tidemq/broker/offset_lowest.py's py_lowest_offsets). The topic is
   the key up to its first '@' (the whole key without one); topics (a dict the caller
   keeps between the calls of one gathering) holds one str object of each of the first
   LOWEST_TOPICS topics, which out's keys then share. Keys that are not str are a
   TypeError. The table is read under the GIL, one slice a call: a caller on a thread
   bounds how long it holds it. Offsets are compared as Python compares them; a
   comparison or a lookup that runs Python code (not an int, or a key of a str subclass)
   may change the dicts, so every object in use is held. */
/* Topics lowest_offsets keeps one str object of, in its topics dict. */
#define LOWEST_TOPICS 65536

/* One key's queues into out (see lowest_offsets); *topic is the last key's topic, reused
   while keys share it, and taken from topics when it is there. -1 on an error. */
static int lowest_of_key(PyObject *key, PyObject *queues, PyObject **topic, PyObject *out,
                         PyObject *topics) {
    Py_ssize_t n = PyUnicode_GET_LENGTH(key);
    Py_ssize_t at = PyUnicode_FindChar(key, '@', 0, n, 1);
    if (at == -2)
        return -1;
    Py_ssize_t tn = at < 0 ? n : at;
    if (*topic == NULL || PyUnicode_GET_LENGTH(*topic) != tn
            || PyUnicode_Tailmatch(key, *topic, 0, tn, -1) != 1) {
        Py_XDECREF(*topic);
        *topic = PyUnicode_Substring(key, 0, tn);
        if (*topic == NULL)
            return -1;
        /* one str object per topic, shared by its keys in out: their comparisons are
           then by identity */
        PyObject *known = PyDict_GetItemWithError(topics, *topic);
        if (known != NULL) {
            Py_INCREF(known);
            Py_SETREF(*topic, known);
        }
        else if (PyErr_Occurred()
                 || (PyDict_GET_SIZE(topics) < LOWEST_TOPICS
                     && PyDict_SetItem(topics, *topic, *topic) < 0)) {
            return -1;
        }
    }
    if (!PyDict_Check(queues)) {
        PyErr_Format(PyExc_TypeError, "lowest_offsets: a key's queues are %.100s, not dict",
                     Py_TYPE(queues)->tp_name);
        return -1;
    }
    Py_ssize_t pos = 0;
    PyObject *q, *off;
    int failed = 0;
    while (!failed && PyDict_Next(queues, &pos, &q, &off)) {
        Py_INCREF(q);
        Py_INCREF(off);
        PyObject *where = PyTuple_Pack(2, *topic, q);
        if (where == NULL) {
            failed = 1;
        }
        else {
            PyObject *old = PyDict_GetItemWithError(out, where);
            int lower = 1;
            if (old != NULL) {
                Py_INCREF(old);
                long long a, b;
                lower = int64_of(off, &a) && int64_of(old, &b)
                    ? a < b : PyObject_RichCompareBool(off, old, Py_LT);
                Py_DECREF(old);
            }
            else if (PyErr_Occurred()) {
                lower = -1;
            }
            if (lower < 0 || (lower && PyDict_SetItem(out, where, off) < 0))
                failed = 1;
            Py_DECREF(where);
        }
        Py_DECREF(q);
        Py_DECREF(off);
    }
    return failed ? -1 : 0;
}

static PyObject *lowest_offsets(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "lowest_offsets takes 6 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *table = args[0], *keys = args[1], *out = args[4], *topics = args[5];
    if (!PyDict_Check(table) || !PyList_Check(keys) || !PyDict_Check(out)
            || !PyDict_CheckExact(topics)) {
        PyErr_SetString(PyExc_TypeError,
                        "lowest_offsets takes a dict, a list, two ints and two dicts");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[2]), stop = PyLong_AsSsize_t(args[3]);
    if ((start == -1 || stop == -1) && PyErr_Occurred())
        return NULL;
    PySlice_AdjustIndices(PyList_GET_SIZE(keys), &start, &stop, 1);  /* as keys[start:stop] */
    PyObject *topic = NULL;
    PyObject *held[DICT_WINDOW], *found[DICT_WINDOW];
    int failed = 0;
    /* A window of keys at a time: their table slots read ahead and their queue maps
       looked up before any is walked, so the cache misses of the lookups overlap. The
       list's length is read again each window and every key held: a lookup may run a
       stored key's __eq__, which may change the list. */
    for (Py_ssize_t at = start; !failed && at < stop && at < PyList_GET_SIZE(keys);
         at += DICT_WINDOW) {
        Py_ssize_t end = at + DICT_WINDOW;
        if (end > stop)
            end = stop;
        if (end > PyList_GET_SIZE(keys))
            end = PyList_GET_SIZE(keys);
        Py_ssize_t n = end - at;
        for (Py_ssize_t i = 0; i < n; i++) {
            held[i] = PyList_GET_ITEM(keys, at + i);
            Py_INCREF(held[i]);
            found[i] = NULL;
        }
        for (Py_ssize_t i = 0; i < n && !failed; i++)
            if (!PyUnicode_Check(held[i])) {
                PyErr_Format(PyExc_TypeError, "lowest_offsets: a key is %.100s, not str",
                             Py_TYPE(held[i])->tp_name);
                failed = 1;
            }
        if (!failed && dict_window_ready(table, held, n, 1) < 0)
            failed = 1;
        for (Py_ssize_t i = 0; i < n && !failed; i++) {
            PyObject *queues = PyDict_GetItemWithError(table, held[i]);
            if (queues == NULL) {
                if (PyErr_Occurred())
                    failed = 1;
                continue;  /* deleted since the keys were listed */
            }
            Py_INCREF(queues);
            found[i] = queues;
            if (PyDict_Check(queues))
                __builtin_prefetch(((PyDictObject *)queues)->ma_keys);
        }
        for (Py_ssize_t i = 0; i < n && !failed; i++)
            if (found[i] != NULL
                    && lowest_of_key(held[i], found[i], &topic, out, topics) < 0)
                failed = 1;
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_DECREF(held[i]);
            Py_XDECREF(found[i]);
        }
    }
    Py_XDECREF(topic);
    if (failed)
        return NULL;
    Py_RETURN_NONE;
}

/* clear_vector_state() -> None

   Zeroes the upper halves of the vector registers (VZEROUPPER) where the CPU has AVX;
   elsewhere it does nothing. Vector code that returns with them still set leaves the CPU
   in a state where later legacy-SSE instructions -- the interpreter's, other
   libraries' -- wait on a merge with those upper halves, so the thread runs slower
   until something clears them: a traced producer, which deflates its trace messages
   with ISA-L, spent more CPU on every message it sent, not only on the deflate, until
   the compression module called this after each ISA-L call. It changes no value
   (tidemq/codec/compression.py: the twin is a no-op). */
static int avx_state = 0;

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx")))
static void zero_upper(void) {
    _mm256_zeroupper();
}
#endif

static PyObject *clear_vector_state(PyObject *self, PyObject *unused) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (avx_state)
        zero_upper();
#endif
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"check_records", check_records, METH_VARARGS, "How many leading records are sound."},
    {"body_crc32", (PyCFunction)(void (*)(void))body_crc32, METH_FASTCALL,
     "zlib.crc32, as the record checks compute it."},
    {"patch_records", patch_records, METH_VARARGS, "Patch offsets and store time."},
    {"stamp_records", stamp_records, METH_VARARGS, "Tile, fill and patch records at once."},
    {"uniform_entries", uniform_entries, METH_VARARGS, "Whether entries share one layout."},
    {"uniform_lengths", uniform_lengths, METH_VARARGS, "Whether entries share one layout."},
    {"uniform_split", uniform_split, METH_VARARGS, "A uniform batch body's split, or None."},
    {"offset_ids", offset_ids, METH_VARARGS, "Comma-joined offset message ids."},
    {"queue_entries", queue_entries, METH_VARARGS, "Consume-queue entries of a run."},
    {"write_records", write_records, METH_VARARGS, "Write records of IPv4 hosts."},
    {"inner_facts", (PyCFunction)(void (*)(void))inner_facts, METH_FASTCALL,
     "An inner batch send's facts, or None."},
    {"send_fields", (PyCFunction)(void (*)(void))send_fields, METH_FASTCALL,
     "A plain send header's fields, or None."},
    {"link_index_entries", link_index_entries, METH_VARARGS,
     "Append key-index entries and chain them to their slots."},
    {"key_hashes", key_hashes, METH_VARARGS, "Key-index hashes of rows of ASCII keys."},
    {"str_key_hashes", str_key_hashes, METH_VARARGS,
     "Key-index hashes of str keys after their records' prefixes."},
    {"record_key_hashes", record_key_hashes, METH_VARARGS,
     "Key-index hashes of records' key sets, words of a text split in C."},
    {"word_count", (PyCFunction)(void (*)(void))word_count, METH_FASTCALL,
     "The non-empty space-separated words of a str."},
    {"lmq_entry_keys", lmq_entry_keys, METH_VARARGS,
     "A dispatch round's LMQ entry keys, sorted, and their order."},
    {"lmq_fanout_runs", lmq_fanout_runs, METH_VARARGS,
     "A dispatch round's LMQ entries as one run per queue, in key order."},
    {"lmq_offset_props", lmq_offset_props, METH_VARARGS,
     "A fan-out batch's stored properties and fan-outs, its LMQ offsets given."},
    {"dict_get_many", dict_get_many, METH_VARARGS,
     "list(map(d.get, keys)), the keys' dict slots read overlapped."},
    {"dict_set_many", dict_set_many, METH_VARARGS,
     "d.update(zip(keys, values)) (each value plus delta, if given), the keys' dict slots "
     "read overlapped."},
    {"decode_plain_messages", (PyCFunction)(void (*)(void))decode_plain_messages,
     METH_FASTCALL, "Plain records into messages; where the first other record starts."},
    {"json_header", (PyCFunction)(void (*)(void))json_header, METH_FASTCALL,
     "A remoting command's JSON header, or None."},
    {"trace_pub_run", (PyCFunction)(void (*)(void))trace_pub_run, METH_FASTCALL,
     "A batch's Pub records as one text, and the ids' widths."},
    {"unique_words", (PyCFunction)(void (*)(void))unique_words, METH_FASTCALL,
     "The words of a text, each once, in order, joined by spaces."},
    {"clear_vector_state", clear_vector_state, METH_NOARGS,
     "Zero the upper halves of the vector registers (VZEROUPPER) where there is AVX."},
    {"offset_entries_json", (PyCFunction)(void (*)(void))offset_entries_json, METH_FASTCALL,
     "The committed offsets' JSON members of a slice of keys, or None."},
    {"lowest_offsets", (PyCFunction)(void (*)(void))lowest_offsets, METH_FASTCALL,
     "Each queue's lowest committed offset over a slice of keys, into a dict."},
    {NULL, NULL, 0, NULL},
};

/* The digest of this file that the build passed (setup.py): the loader compares it with the
   source beside the module, so a build left behind by an edit is not used. */
#ifndef TIDEMQ_SOURCE_DIGEST
#define TIDEMQ_SOURCE_DIGEST ""
#endif

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_crecords", "Compiled loops of uniform batches.", -1, methods,
};

PyMODINIT_FUNC PyInit__crecords(void) {
#ifdef HAVE_CLMUL_CRC
    __builtin_cpu_init();
    clmul_crc = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
    avx2_hashes = __builtin_cpu_supports("avx2");
    wide_crc = clmul_crc && __builtin_cpu_supports("vpclmulqdq")
               && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
#endif
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    avx_state = __builtin_cpu_supports("avx");
#endif
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddStringConstant(m, "SOURCE_DIGEST", TIDEMQ_SOURCE_DIGEST) < 0)
        Py_CLEAR(m);
#ifdef DICT_READ_AHEAD
    if (m != NULL && PyModule_AddIntConstant(m, "DICT_READ_AHEAD", 1) < 0)
#else
    if (m != NULL && PyModule_AddIntConstant(m, "DICT_READ_AHEAD", 0) < 0)
#endif
        Py_CLEAR(m);
    return m;
}
