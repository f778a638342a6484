/* tidemq.formats._crecords: the per-message loops of a uniform batch, compiled.

A producer batch of one layout (every entry the same size, the same property bytes but
for the UNIQ_KEY value) becomes commit-log records of one size, tiled from a template
(tidemq/formats/record/batch.py). What then varies per message is a handful of
fixed-offset fields; in Python each costs a numpy call per column or a call per message.
These functions do the same work in one call per batch; check_records checks the
stored records of a read in one call. Every one has a pure-Python twin in
tidemq/formats/record/loops.py (the fallback when this module is not built),
and the tests compare the two byte for byte.

Byte positions, all big-endian: the names below are those of tidemq/formats/batch.py
(client batch entries, ENTRY_OFF_*) and tidemq/formats/record/layout.py (records with
IPv4 hosts, OFF_*), where the layouts are. loops.py checks on import that this module
writes at the layout's positions and refuses it otherwise.

The GIL is kept: the work is microseconds, and dropping it lets another thread hold the
event loop up for a switch interval.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
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

/* fill_records(buf, rec, data, n, size, blen, props_at)

   Copy each of the n client entries of `data` into record i of `buf` (n tiled records
   of rec bytes): FLAG, BODY and PROPERTIES, and the masked CRC32 of the body. */
static PyObject *fill_records(PyObject *self, PyObject *args) {
    Py_buffer out, in;
    Py_ssize_t rec, n, size, blen, props_at;
    if (!PyArg_ParseTuple(args, "w*ny*nnnn", &out, &rec, &in, &n, &size, &blen, &props_at))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t pstart = ENTRY_OVERHEAD + blen, plen = size - pstart;
    if (n < 0 || blen < 0 || plen < 0 || rec < OFF_BODY + blen || props_at < OFF_BODY + blen
            || props_at + plen > rec || out.len < n * rec || in.len < n * size) {
        PyErr_Format(PyExc_ValueError,
                     "fill_records: %zd entries of %zd bytes (%zd-byte bodies) do not fit "
                     "%zd records of %zd bytes (properties at %zd) in %zd/%zd bytes",
                     n, size, blen, n, rec, props_at, in.len, out.len);
        goto done;
    }
    unsigned char *dst = (unsigned char *)out.buf;
    const unsigned char *src = (const unsigned char *)in.buf;
    for (Py_ssize_t i = 0; i < n; i++, dst += rec, src += size) {
        memcpy(dst + OFF_FLAG, src + ENTRY_OFF_FLAG, 4);
        memcpy(dst + OFF_BODY, src + ENTRY_OFF_BODY, (size_t)blen);
        memcpy(dst + props_at, src + pstart, (size_t)plen);
        uLong crc = crc32(0L, src + ENTRY_OFF_BODY, (uInt)blen);
        put_be32(dst + OFF_BODY_CRC, (uint32_t)crc & 0x7FFFFFFFu);
    }
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&out);
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
    const unsigned char *first = (const unsigned char *)in.buf, *e = first;
    int same = 1;
    for (Py_ssize_t i = 0; i < n && same; i++, e += size) {
        for (Py_ssize_t k = pstart + ustart; k < pstart + uend; k++) {
            if (e[k] >= 0x80 || e[k] == 0x01 || e[k] == 0x02) { same = 0; break; }
        }
        if (i == 0 || !same) continue;
        same = memcmp(e + ENTRY_OFF_TOTAL_SIZE, first + ENTRY_OFF_TOTAL_SIZE, 4) == 0
            && memcmp(e + ENTRY_OFF_BODY_LENGTH, first + ENTRY_OFF_BODY_LENGTH, 4) == 0
            && memcmp(e + pstart - 2, first + pstart - 2, (size_t)(ustart + 2)) == 0
            && memcmp(e + pstart + uend, first + pstart + uend, (size_t)(plen - uend)) == 0;
    }
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
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i) *p++ = ',';
        memcpy(p, pre, (size_t)plen);
        p += plen;
        uint64_t v = (uint64_t)(start + (long long)i * step);
        for (int d = 15; d >= 0; d--, v >>= 4)
            p[d] = (unsigned char)hex[v & 0xF];
        p += 16;
    }
    return s;
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
    uint32_t crc = (uint32_t)crc32(0L, body, (uInt)blen) & 0x7FFFFFFFu;
    return (uint32_t)get_be32(r + OFF_BODY_CRC) == crc;
}

/* check_records(buf, phys, starts, sizes) -> int

   Record i of buf is the sizes[i] bytes at starts[i], stored at log position
   phys + starts[i]: how many of them, from the first, are sound beyond doubt (see
   record_sound). The record where this stops may still be sound (UTF-8 beyond ASCII):
   the caller looks closer. */
static PyObject *check_records(PyObject *self, PyObject *args) {
    Py_buffer in;
    long long phys;
    PyObject *starts, *sizes, *at_seq = NULL, *size_seq = NULL, *result = NULL;
    if (!PyArg_ParseTuple(args, "y*LOO", &in, &phys, &starts, &sizes))
        return NULL;
    at_seq = PySequence_Fast(starts, "check_records: starts must be a sequence");
    if (at_seq == NULL)
        goto done;
    size_seq = PySequence_Fast(sizes, "check_records: sizes must be a sequence");
    if (size_seq == NULL)
        goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(size_seq), i;
    if (PySequence_Fast_GET_SIZE(at_seq) != n) {
        PyErr_SetString(PyExc_ValueError, "check_records: starts and sizes differ in length");
        goto done;
    }
    const unsigned char *b = in.buf;
    for (i = 0; i < n; i++) {
        Py_ssize_t at = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(at_seq, i));
        Py_ssize_t size = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(size_seq, i));
        if ((at == -1 || size == -1) && PyErr_Occurred())
            goto done;
        if (at < 0 || size < MIN_RECORD_SIZE || size > in.len - at
                || !record_sound(b + at, size, phys + (long long)at))
            break;
    }
    result = PyLong_FromSsize_t(i);
done:
    Py_XDECREF(at_seq);
    Py_XDECREF(size_seq);
    PyBuffer_Release(&in);
    return result;
}

static PyMethodDef methods[] = {
    {"check_records", check_records, METH_VARARGS, "How many leading records are sound."},
    {"fill_records", fill_records, METH_VARARGS, "Copy entry columns into tiled records."},
    {"patch_records", patch_records, METH_VARARGS, "Patch offsets and store time."},
    {"uniform_entries", uniform_entries, METH_VARARGS, "Whether entries share one layout."},
    {"offset_ids", offset_ids, METH_VARARGS, "Comma-joined offset message ids."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_crecords", "Compiled loops of uniform batches.", -1, methods,
};

PyMODINIT_FUNC PyInit__crecords(void) { return PyModule_Create(&module); }
