/* precision.c — test_ops' mixed-precision ops: the bf16/f16 conversions of core
 * against independent references (GCC's _Float16 casts; rounding in double),
 * Cast nodes both ways with acc and their gradient, GradScaler.unscale, and a
 * half node that the CPU runs through F32 copies (exec/node.c). */
#include "harness.h"

/* ---- references ----------------------------------------------------------------
 * v rounded to a binary format with `sig` significant bits (implicit one
 * included), smallest normal exponent emin (2^emin) and largest finite value
 * max, in double arithmetic: the two neighbours lo <= |v| < lo + ulp, the
 * nearer one, a tie to the one with an even multiple of ulp; past max, inf.
 * Every float and every neighbour is exact in double, so this is exact. */
static double ref_round(double v, int sig, int emin, double max) {
    if (v != v) return v;
    double a = fabs(v);
    if (isinf(a)) return v;
    int e;
    frexp(a, &e); /* a = m 2^e, m in [0.5, 1) */
    if (e - 1 < emin) e = emin + 1; /* subnormal range: the ulp of the smallest normals */
    double ulp = ldexp(1.0, e - sig), q = floor(a / ulp), r = a - q * ulp;
    if (r > ulp / 2 || (r == ulp / 2 && fmod(q, 2) == 1)) q += 1;
    double out = q * ulp;
    if (out > max) out = INFINITY;
    return v < 0 || (v == 0 && signbit(v)) ? -out : out;
}
#define BF16_MAX 3.3895313892515355e38 /* (2 - 2^-7) 2^127 */
static double ref_bf16(double v) { return ref_round(v, 8, -126, BF16_MAX); }
static double ref_f16(double v) { return ref_round(v, 11, -14, 65504.0); }

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float bitsf(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* The bf16 and f16 values of bit patterns, read independently of core. */
static double bf16_val(uint16_t h) { return bitsf((uint32_t)h << 16); }
static double f16_val(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return h & 0x8000 ? -v : v;
}
static bool is_nan16(uint16_t h, bool bf) { return bf ? (h & 0x7f80) == 0x7f80 && (h & 0x7f) : (h & 0x7c00) == 0x7c00 && (h & 0x3ff); }

/* Is the half h (bf16 or f16) what the reference says v rounds to? Bit for
 * bit, -0 and the sign of inf included; a NaN must stay a NaN of v's sign. */
static bool half_ok(uint16_t h, float v, bool bf) {
    if (v != v) return is_nan16(h, bf) && ((h >> 15) == (fbits(v) >> 31));
    double want = bf ? ref_bf16(v) : ref_f16(v), got = bf ? bf16_val(h) : f16_val(h);
    if (is_nan16(h, bf)) return false;
    return got == want && signbit(got) == signbit(want);
}

/* 32 random bits (the harness's sequence). */
static uint32_t rbits(void) { return (uint32_t)(urand() * 4294967296.0); }

/* A float of random sign and mantissa with exponent in [elo, ehi]. */
static float rand_float_exp(int elo, int ehi) {
    int e = elo + (int)(urand() * (ehi - elo + 1));
    uint32_t u = (rbits() & 0x807fffffu) | ((uint32_t)(e + 127) << 23);
    return bitsf(u);
}

/* The floats that matter most to a rounding: each half value h and the
 * points around it, in ulps of the half: the midpoint to its neighbour (a
 * tie), and one float either side of the tie. */
static int edge_floats(uint16_t h, bool bf, float *out) {
    double v = bf ? bf16_val(h) : f16_val(h);
    if (!isfinite(v)) return 0;
    uint16_t up = (uint16_t)(h + 1); /* the next value away from zero (same sign) */
    double w = bf ? bf16_val(up) : f16_val(up);
    if (!isfinite(w)) w = bf ? ldexp(1.0, 128) * (v < 0 ? -1 : 1) : 65536.0 * (v < 0 ? -1 : 1);
    float mid = (float)((v + w) / 2); /* exact: one bit more than the half has */
    int k = 0;
    out[k++] = (float)v;
    out[k++] = mid;
    out[k++] = nextafterf(mid, 0.0f);
    out[k++] = nextafterf(mid, mid > 0 ? INFINITY : -INFINITY);
    return k;
}

/* ---- the conversions ---------------------------------------------------------------- */
static void test_conversions(void) {
    /* every f16 bit pattern: to float as GCC's _Float16 says, and back */
    int bad_to = 0, bad_back = 0, bad_bto = 0, bad_bback = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float f = hr_f16_to_f32(h);
#ifdef __FLT16_MAX__
        _Float16 g;
        memcpy(&g, &h, 2);
        float want = (float)g;
#else
        float want = (float)f16_val(h);
#endif
        bool nan = is_nan16(h, false);
        if (nan ? !(f != f) || (fbits(f) >> 31) != (h >> 15u) : fbits(f) != fbits(want)) bad_to++;
        uint16_t back = hr_f32_to_f16(f);
        if (nan ? !is_nan16(back, false) || (back >> 15) != (h >> 15) : back != h) bad_back++;
        /* bf16: the float is the pattern in the top half, and back */
        float b = hr_bf16_to_f32(h);
        nan = is_nan16(h, true);
        if (nan ? !(b != b) : fbits(b) != (uint32_t)h << 16) bad_bto++;
        uint16_t bb = hr_f32_to_bf16(b);
        if (nan ? !is_nan16(bb, true) || (bb >> 15) != (h >> 15) : bb != h) bad_bback++;
    }
    CHECK(bad_to == 0, "hr_f16_to_f32: %d of 65536 patterns differ from _Float16's value", bad_to);
    CHECK(bad_back == 0, "hr_f32_to_f16(hr_f16_to_f32(h)) != h for %d of 65536 patterns", bad_back);
    CHECK(bad_bto == 0, "hr_bf16_to_f32: %d of 65536 patterns are not the float with those top bits", bad_bto);
    CHECK(bad_bback == 0, "hr_f32_to_bf16(hr_bf16_to_f32(h)) != h for %d of 65536 patterns", bad_bback);

    /* floats to f16 and bf16: fixed edges, then every half's tie points, then random floats */
    const float fixed[] = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65505.0f, 65519.0f, 65519.996f, 65520.0f, -65520.0f,
                           65536.0f, 1e6f, 3.0e38f, 3.4028235e38f, INFINITY, -INFINITY, NAN, -NAN,
                           bitsf(0x7f800001u) /* signalling NaN */, bitsf(0xff800001u), 5.9604645e-8f /* 2^-24 */,
                           2.9802322e-8f /* 2^-25: the tie between 0 and 2^-24, to 0 */, 2.9802326e-8f,
                           8.940697e-8f /* 1.5 * 2^-24: to 2^-23 */, 6.1035156e-5f /* 2^-14 */, 6.1e-5f, 1e-45f,
                           1.1754942e-38f /* the largest float subnormal */, 1.17549435e-38f, 3.3895314e38f,
                           3.3961776e38f /* bf16's max + half an ulp: to inf */, 3.3961774e38f, 1.00390625f /* 1 + 2^-8: bf16 tie to 1 */,
                           1.01171875f /* 1 + 3 * 2^-8: bf16 tie to 1 + 2^-6 */, 1.00048828125f /* 1 + 2^-11: f16 tie to 1 */};
    int nf = (int)(sizeof fixed / sizeof *fixed), bad16 = 0, badb = 0, n = 0, bad16gcc = 0;
    char first16[160] = "", firstb[160] = "";
    for (int pass = 0; pass < 4; pass++) {
        int count = pass == 0 ? nf : pass == 1 ? 65536 : 400000;
        for (int i = 0; i < count; i++) {
            float vs[4];
            int m = 1;
            if (pass == 0) vs[0] = fixed[i];
            else if (pass == 1) m = edge_floats((uint16_t)i, false, vs);
            else if (pass == 2) vs[0] = rand_float_exp(-26, 17);              /* f16's range and around it */
            else vs[0] = bitsf(rbits());                                    /* any float */
            float eb[4];
            int mb = pass == 1 ? edge_floats((uint16_t)i, true, eb) : 0;
            for (int j = 0; j < m + mb; j++) {
                float v = j < m ? vs[j] : eb[j - m];
                uint16_t h = hr_f32_to_f16(v), b = hr_f32_to_bf16(v);
                n++;
                if (!half_ok(h, v, false) && bad16++ == 0)
                    snprintf(first16, sizeof first16, "%a -> 0x%04x, reference %a", v, h, ref_f16(v));
                if (!half_ok(b, v, true) && badb++ == 0)
                    snprintf(firstb, sizeof firstb, "%a -> 0x%04x, reference %a", v, b, ref_bf16(v));
#ifdef __FLT16_MAX__
                _Float16 g = (_Float16)v;
                uint16_t gh;
                memcpy(&gh, &g, 2);
                if (v == v ? gh != h : !is_nan16(h, false)) bad16gcc++;
#endif
            }
        }
    }
    printf("  half conversions: %d floats (edges, every half's ties, random) to f16 and bf16\n", n);
    CHECK(bad16 == 0, "hr_f32_to_f16: %d of %d floats not rounded to nearest even (first: %s)", bad16, n, first16);
    CHECK(badb == 0, "hr_f32_to_bf16: %d of %d floats not rounded to nearest even (first: %s)", badb, n, firstb);
#ifdef __FLT16_MAX__
    CHECK(bad16gcc == 0, "hr_f32_to_f16: %d of %d floats differ from GCC's (_Float16) cast", bad16gcc, n);
#endif
    /* the reference itself, on cases worked by hand (so that it cannot agree with a wrong kernel by being wrong) */
    CHECK(ref_f16(65519.0) == 65504.0 && isinf(ref_f16(65520.0)) && ref_f16(ldexp(1, -25)) == 0 &&
          ref_f16(ldexp(3, -25)) == ldexp(1, -23) && ref_f16(1 + ldexp(1, -11)) == 1 &&
          ref_f16(1 + ldexp(3, -11)) == 1 + ldexp(1, -9) && ref_bf16(1 + ldexp(1, -8)) == 1 &&
          ref_bf16(1 + ldexp(3, -8)) == 1 + ldexp(1, -6) && ref_bf16(ldexp(1, -149)) == 0 &&
          ref_bf16(ldexp(3, -134)) == ldexp(1, -132),
          "the rounding reference fails its hand-worked cases");
}

/* ---- Cast nodes ----------------------------------------------------------------------- */
static double half_val(const void *p, hr_dtype t, int64_t i) {
    uint16_t h = ((const uint16_t *)p)[i];
    return t == HR_BF16 ? bf16_val(h) : f16_val(h);
}
static void half_set(void *p, hr_dtype t, int64_t i, double v) { /* v must be a value of the type */
    float f = (float)v;
    ((uint16_t *)p)[i] = t == HR_BF16 ? (uint16_t)(fbits(f) >> 16) : hr_f32_to_f16(f);
}

/* F32 -> half and back, overwrite and acc, against the references. */
static void test_cast_type(hr_dtype ht) {
    const bool bf = ht == HR_BF16;
    const char *op = bf ? "Cast(F32<->BF16)" : "Cast(F32<->F16)";
    const int n = 1000;
    double *x = dalloc(n), *pre = dalloc(n), *want = dalloc(n);
    for (int i = 0; i < n; i++) {
        x[i] = frand(-4, 4);
        if (i % 10 == 0) x[i] = (double)rand_float_exp(bf ? -126 : -26, bf ? 127 : 16); /* small, large, overflowing */
    }
    x[0] = 0, x[1] = -0.0, x[2] = INFINITY, x[3] = 70000, x[4] = 65520, x[5] = 1e-40 /* a float subnormal */;
    kt k;
    kt_init(&k);
    int tx = KT(&k, n), th = kt_tensor(&k, ht, 1, (int64_t[]){n}), tb = KT(&k, n);
    kt_set(&k, tx, x);
    hr_node c = hr_node_make(HR_OP_CAST, -1);
    c.in[0] = tx, c.nin = 1, c.out[0] = th, c.nout = 1;
    memset(k.ptr[th], 0xff, (size_t)n * 2); /* NaNs: every element must be written */
    kt_run(&k, &c);
    int bad = 0;
    for (int i = 0; i < n; i++) bad += !half_ok(((uint16_t *)k.ptr[th])[i], (float)x[i], bf);
    CHECK(bad == 0, "%s F32 -> half: %d of %d elements not rounded to nearest even", op, bad, n);

    /* acc: y (half) += x, the sum in fp32 and rounded once */
    for (int i = 0; i < n; i++) {
        x[i] = frand(-2, 2);
        pre[i] = bf ? ref_bf16(frand(-2, 2)) : ref_f16(frand(-2, 2));
        half_set(k.ptr[th], ht, i, pre[i]);
    }
    kt_set(&k, tx, x);
    c.accum[0] = true;
    kt_run(&k, &c);
    bad = 0;
    for (int i = 0; i < n; i++) {
        double s = (double)(float)(pre[i] + x[i]), r = bf ? ref_bf16(s) : ref_f16(s);
        bad += half_val(k.ptr[th], ht, i) != r;
    }
    CHECK(bad == 0, "%s F32 -> half with acc: %d of %d elements differ from round(fp32 sum)", op, bad, n);

    /* half -> F32: exact; with acc, the fp32 sum */
    hr_node b = hr_node_make(HR_OP_CAST, -1);
    b.in[0] = th, b.nin = 1, b.out[0] = tb, b.nout = 1;
    for (int i = 0; i < n; i++) want[i] = half_val(k.ptr[th], ht, i);
    kt_fillf(&k, tb, NAN);
    kt_run(&k, &b);
    compare(op, "half -> F32 (exact)", kf(&k, tb), want, n, 0);
    fill(pre, n, -2, 2);
    kt_set(&k, tb, pre);
    b.accum[0] = true;
    kt_run(&k, &b);
    for (int i = 0; i < n; i++) want[i] = (float)(pre[i] + want[i]);
    compare(op, "half -> F32 with acc (fp32 sum)", kf(&k, tb), want, n, 0);

    /* the gradient of a cast to half (a weight's or an activation's) is a cast
     * back of dy: d(loss)/dx = dy exactly, dx in F32; overwrite, accumulate */
    b.accum[0] = false;
    for (int i = 0; i < n; i++) want[i] = half_val(k.ptr[th], ht, i);
    check_backward(&k, &b, (double *[]){want}, op, 1e-7, false);
    kt_free(&k);
    free(x), free(pre), free(want);
}

/* ---- GradScaler.unscale ------------------------------------------------------------- */
static void test_unscale(void) {
    const char *op = "GradScaler.unscale";
    const int n = 513;
    double *g = dalloc(n), *want = dalloc(n);
    kt k;
    kt_init(&k);
    int tg = KT(&k, n), tf = KT(&k, 1);
    hr_step_info si = kt_si();
    hr_node u = hr_node_make(HR_OP_UNSCALE, -1);
    u.in[0] = tg, u.nin = 1, u.out[0] = tf, u.nout = 1;
    /* inverse scales: a power of two (exact) and 1/3 (one rounding: the fp32 product) */
    const float invs[2] = {1.0f / 65536.0f, 1.0f / 3.0f};
    for (int c = 0; c < 2; c++) {
        fill(g, n, -70000, 70000);
        kt_set(&k, tg, g);
        si.inv_scale = invs[c];
        for (int i = 0; i < n; i++) want[i] = (float)(g[i] * (double)invs[c]); /* exact product, rounded once */
        kf(&k, tf)[0] = NAN; /* the first node writes found_inf whatever was there */
        u.accum[0] = false;
        kt_run_si(&k, &u, &si);
        compare(op, c ? "g * (1/3)" : "g * 2^-16", kf(&k, tg), want, n, 0);
        CHECK(kf(&k, tf)[0] == 0.0f, "%s: finite gradients, no acc: found_inf %g, want 0", op, kf(&k, tf)[0]);
    }
    /* found_inf: set by +inf, -inf, NaN anywhere (first, middle, last); finite
     * elements are still scaled (as PyTorch's kernel does) */
    const float bads[3] = {INFINITY, -INFINITY, NAN};
    const int where[3] = {0, n / 2, n - 1};
    si.inv_scale = 0.5f;
    for (int c = 0; c < 9; c++) {
        fill(g, n, -1, 1);
        g[where[c % 3]] = bads[c / 3];
        kt_set(&k, tg, g);
        kf(&k, tf)[0] = 0.0f;
        u.accum[0] = c % 2 == 1; /* a later node (acc) sets it as well as the first one */
        kt_run_si(&k, &u, &si);
        CHECK(kf(&k, tf)[0] == 1.0f, "%s: %g at element %d (acc %d): found_inf %g, want 1", op, (double)bads[c / 3],
              where[c % 3], u.accum[0], kf(&k, tf)[0]);
        int wrong = 0;
        for (int i = 0; i < n; i++) {
            float r = kf(&k, tg)[i];
            if (i == where[c % 3]) wrong += isnan(g[i]) ? !isnan(r) : r != (float)g[i];
            else wrong += r != (float)(g[i] * 0.5);
        }
        CHECK(wrong == 0, "%s: with a non-finite element, %d elements not scaled as they should", op, wrong);
    }
    /* acc: a later node leaves found_inf as it was when its gradients are
     * finite (1 stays 1, 0 stays 0); without acc, 1 is reset to 0 */
    const float before[3] = {1.0f, 0.0f, 1.0f};
    const bool accs[3] = {true, true, false};
    const float after[3] = {1.0f, 0.0f, 0.0f};
    for (int c = 0; c < 3; c++) {
        fill(g, n, -1, 1);
        kt_set(&k, tg, g);
        kf(&k, tf)[0] = before[c];
        u.accum[0] = accs[c];
        kt_run_si(&k, &u, &si);
        CHECK(kf(&k, tf)[0] == after[c], "%s: finite gradients, found_inf %g before, acc %d: %g after, want %g", op,
              before[c], accs[c], kf(&k, tf)[0], after[c]);
    }
    /* large finite values are not inf: float's max, unscaled */
    for (int i = 0; i < n; i++) g[i] = i % 2 ? 3.4028235e38 : -3.4028235e38;
    kt_set(&k, tg, g);
    u.accum[0] = false;
    kt_run_si(&k, &u, &si);
    CHECK(kf(&k, tf)[0] == 0.0f && kf(&k, tg)[1] == 1.70141173e38f, "%s: FLT_MAX taken for inf (found_inf %g)", op,
          kf(&k, tf)[0]);
    kt_free(&k);
    free(g), free(want);
}

/* ---- a half node on the CPU: through F32 copies ------------------------------------
 * Linear with bf16 x, W and y: the F32 product of the bf16 values, rounded
 * once to bf16. The float64 reference rounded to bf16 agrees unless the fp32
 * sum's error (<= in * 2^-24 * sum|x w|, ~1e-6 relative here) moves a value
 * across a bf16 rounding boundary: then it is one bf16 ulp off, never more. */
static void test_half_node(void) {
    const char *op = "Linear(bf16, through F32 copies)";
    const int N = 5, in = 9, out = 4;
    double *x = dalloc(N * in), *W = dalloc(out * in), *y = dalloc(N * out);
    for (int i = 0; i < N * in; i++) x[i] = ref_bf16(frand(-1, 1));
    for (int i = 0; i < out * in; i++) W[i] = ref_bf16(frand(-1, 1));
    kt k;
    kt_init(&k);
    int tx = kt_tensor(&k, HR_BF16, 2, (int64_t[]){N, in}), tw = kt_tensor(&k, HR_BF16, 2, (int64_t[]){out, in}),
        ty = kt_tensor(&k, HR_BF16, 2, (int64_t[]){N, out});
    for (int i = 0; i < N * in; i++) half_set(k.ptr[tx], HR_BF16, i, x[i]);
    for (int i = 0; i < out * in; i++) half_set(k.ptr[tw], HR_BF16, i, W[i]);
    memset(k.ptr[ty], 0xff, (size_t)N * out * 2);
    hr_node n = hr_node_make(HR_OP_LINEAR, -1);
    n.a.in_f = in, n.a.out_f = out, n.a.bias = false;
    n.in[0] = tx, n.in[1] = tw, n.in[2] = -1, n.nin = 2, n.out[0] = ty, n.nout = 1;
    kt_run(&k, &n);
    ref_linear(x, W, NULL, N, in, out, y);
    int off = 0, far = 0;
    for (int i = 0; i < N * out; i++) {
        double got = half_val(k.ptr[ty], HR_BF16, i), r = ref_bf16(y[i]);
        if (got == r) continue;
        off++;
        int e;
        frexp(r, &e);
        far += fabs(got - r) > ldexp(1.0, e - 8) * 1.0000001;
    }
    CHECK(far == 0, "%s: %d of %d outputs more than one bf16 ulp from the rounded float64 product", op, far, N * out);
    CHECK(off <= 2, "%s: %d of %d outputs off by one ulp (rounding boundaries are rare: at most 2 expected)", op, off,
          N * out);
    kt_free(&k);
    free(x), free(W), free(y);
}

void test_precision(void) {
    test_conversions();
    test_cast_type(HR_BF16);
    test_cast_type(HR_F16);
    test_unscale();
    test_half_node();
}

OPS_TALLY(ops_tally_precision)
