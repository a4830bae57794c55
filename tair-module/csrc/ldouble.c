/*
 * Long-double helpers for EXINCRBYFLOAT.
 *
 * Redis (INCRBYFLOAT) and TairString do their float arithmetic in C `long double`
 * (80-bit x87 extended precision on x86_64) and print the result with
 * "%.17Lf" minus trailing zeros. Rust has no long double type, so these few
 * functions keep that arithmetic and formatting byte-for-byte identical.
 * They never allocate and never call back into Rust.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Same bound as Redis' MAX_LONG_DOUBLE_CHARS. */
#define VERROU_LD_BUF 5120

/* Strict parse: the whole buffer must be a number accepted by strtold, with no
 * leading space, no NaN and no overflow/underflow to inf/0. Returns 1 on success. */
static int verrou_parse(const char *s, size_t len, long double *out) {
    char buf[VERROU_LD_BUF];
    char *end = NULL;
    long double v;

    if (len >= sizeof(buf)) return 0;
    memcpy(buf, s, len);
    buf[len] = '\0';
    errno = 0;
    v = strtold(buf, &end);
    if (isspace((unsigned char)buf[0])) return 0;
    if (end == NULL || *end != '\0') return 0;
    if (errno == ERANGE && (isinf(v) || v == 0)) return 0;
    if (errno == EINVAL) return 0;
    if (isnan(v)) return 0;
    *out = v;
    return 1;
}

int verrou_ld_valid(const char *s, size_t len) {
    long double v;
    return verrou_parse(s, len, &v);
}

/* 1 when both parse and b < a, 0 otherwise. */
int verrou_ld_less(const char *a, size_t alen, const char *b, size_t blen) {
    long double x, y;
    if (!verrou_parse(a, alen, &x) || !verrou_parse(b, blen, &y)) return 0;
    return y < x;
}

/*
 * result = current + incr, checked against optional bounds.
 * cur == NULL means a missing key (current value 0).
 * Returns 0 on success (out/out_len set), 1 when the operands do not parse,
 * 2 when the result is inf/nan or outside [min, max].
 */
int verrou_ld_incr(const char *cur, size_t cur_len, const char *incr, size_t incr_len,
                   const char *min, size_t min_len, const char *max, size_t max_len,
                   char *out, size_t out_cap, size_t *out_len) {
    long double c = 0, i, lo = 0, hi = 0, r;
    int n;
    size_t l;

    if (cur != NULL && !verrou_parse(cur, cur_len, &c)) return 1;
    if (!verrou_parse(incr, incr_len, &i)) return 1;
    if (min != NULL && !verrou_parse(min, min_len, &lo)) return 1;
    if (max != NULL && !verrou_parse(max, max_len, &hi)) return 1;

    r = c + i;
    if (isnan(r) || isinf(r)) return 2;
    if (max != NULL && r > hi) return 2;
    if (min != NULL && r < lo) return 2;

    n = snprintf(out, out_cap, "%.17Lf", r);
    if (n < 0 || (size_t)n + 1 > out_cap) {
        *out_len = 0;
        return 0;
    }
    l = (size_t)n;
    if (memchr(out, '.', l) != NULL) {
        while (l > 0 && out[l - 1] == '0') l--;
        if (l > 0 && out[l - 1] == '.') l--;
    }
    *out_len = l;
    return 0;
}
