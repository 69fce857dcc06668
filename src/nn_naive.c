// nn_naive: the layers of nn.c written the obvious way, in double precision, with the same shapes
// and gradient conventions (see nn.h).  They define what the fast kernels must compute; the tests
// check them against central finite differences and the float kernels against them.
#include <math.h>
#include <string.h>

#include "nn.h"

void nn_naive_linear_forward(double *y, const double *x, const double *W, const double *b, int B, int IN, int OUT) {
    for (int s = 0; s < B; s++)
        for (int o = 0; o < OUT; o++) {
            double acc = b ? b[o] : 0.0;
            for (int i = 0; i < IN; i++) acc += x[(size_t)s * IN + i] * W[(size_t)o * IN + i];
            y[(size_t)s * OUT + o] = acc;
        }
}

void nn_naive_linear_backward(double *dx, double *dW, double *db, const double *dy, const double *x,
                              const double *W, int B, int IN, int OUT) {
    for (int s = 0; s < B; s++)
        for (int o = 0; o < OUT; o++) {
            double g = dy[(size_t)s * OUT + o];
            for (int i = 0; i < IN; i++) dW[(size_t)o * IN + i] += g * x[(size_t)s * IN + i];
            if (db) db[o] += g;
        }
    if (!dx) return;
    for (int s = 0; s < B; s++)
        for (int i = 0; i < IN; i++) {
            double acc = 0.0;
            for (int o = 0; o < OUT; o++) acc += dy[(size_t)s * OUT + o] * W[(size_t)o * IN + i];
            dx[(size_t)s * IN + i] = acc;
        }
}

void nn_naive_relu_forward(double *y, const double *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = x[i] < 0.0 ? 0.0 : x[i];
}

void nn_naive_relu_backward(double *dx, const double *dy, const double *y, size_t n) {
    for (size_t i = 0; i < n; i++) dx[i] = y[i] > 0.0 ? dy[i] : 0.0;
}

void nn_naive_sigmoid_forward(double *y, const double *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = 1.0 / (1.0 + exp(-x[i]));
}

void nn_naive_sigmoid_backward(double *dx, const double *dy, const double *y, size_t n) {
    for (size_t i = 0; i < n; i++) dx[i] = dy[i] * y[i] * (1.0 - y[i]);
}

// Vector k of sample s's T = [z; e_1..e_F].
static const double *naive_T(const double *z, const double *emb, int s, int k, int F, int D, int E) {
    return k == 0 ? z + (size_t)s * D : emb + ((size_t)s * F + (k - 1)) * E;
}

void nn_naive_interact_dot_forward(double *out, const double *z, const double *emb, int B, int F, int D, int E) {
    const int W = nn_interact_dot_width(F, D);
    for (int s = 0; s < B; s++) {
        double *o = out + (size_t)s * W;
        for (int k = 0; k < D; k++) o[k] = z[(size_t)s * D + k];
        int n = D;
        for (int i = 1; i <= F; i++)
            for (int j = 0; j < i; j++) {
                const double *a = naive_T(z, emb, s, i, F, D, E), *b = naive_T(z, emb, s, j, F, D, E);
                double acc = 0.0;
                for (int k = 0; k < D; k++) acc += a[k] * b[k];
                o[n++] = acc;
            }
    }
}

void nn_naive_interact_dot_backward(double *dz, double *demb, const double *dout, const double *z,
                                    const double *emb, int B, int F, int D, int E) {
    const int W = nn_interact_dot_width(F, D);
    for (int s = 0; s < B; s++) {
        const double *g = dout + (size_t)s * W;
        double *dzs = dz + (size_t)s * D;
        for (int k = 0; k < D; k++) dzs[k] = g[k];
        int n = D;
        for (int i = 1; i <= F; i++)
            for (int j = 0; j < i; j++, n++) {
                const double *a = naive_T(z, emb, s, i, F, D, E), *b = naive_T(z, emb, s, j, F, D, E);
                double *da = demb + ((size_t)s * F + (i - 1)) * E;
                double *db = j == 0 ? dzs : demb + ((size_t)s * F + (j - 1)) * E;
                for (int k = 0; k < D; k++) {
                    da[k] += g[n] * b[k];
                    db[k] += g[n] * a[k];
                }
            }
    }
}

void nn_naive_concat_forward(double *out, const double *a, const double *emb, int B, int Na, int F, int D, int E) {
    const size_t W = (size_t)Na + (size_t)F * D;
    for (int s = 0; s < B; s++) {
        for (int i = 0; i < Na; i++) out[s * W + i] = a[(size_t)s * Na + i];
        for (int f = 0; f < F; f++)
            for (int k = 0; k < D; k++) out[s * W + Na + (size_t)f * D + k] = emb[((size_t)s * F + f) * E + k];
    }
}

void nn_naive_concat_backward(double *da, double *demb, const double *dout, int B, int Na, int F, int D, int E) {
    const size_t W = (size_t)Na + (size_t)F * D;
    for (int s = 0; s < B; s++) {
        if (da)
            for (int i = 0; i < Na; i++) da[(size_t)s * Na + i] = dout[s * W + i];
        for (int f = 0; f < F; f++)
            for (int k = 0; k < D; k++) demb[((size_t)s * F + f) * E + k] += dout[s * W + Na + (size_t)f * D + k];
    }
}

void nn_naive_cross_forward(double *y, double *u, const double *x0, const double *xl, const double *W,
                            const double *b, int B, int d) {
    nn_naive_linear_forward(u, xl, W, b, B, d, d);
    for (size_t i = 0; i < (size_t)B * d; i++) y[i] = x0[i] * u[i] + xl[i];
}

void nn_naive_cross_backward(double *dx0, double *dxl, double *dW, double *db, const double *dy, const double *x0,
                             const double *xl, const double *u, const double *W, int B, int d) {
    for (int s = 0; s < B; s++)
        for (int o = 0; o < d; o++) {
            size_t so = (size_t)s * d + o;
            double du = dy[so] * x0[so];
            dx0[so] += dy[so] * u[so];
            db[o] += du;
            for (int i = 0; i < d; i++) dW[(size_t)o * d + i] += du * xl[(size_t)s * d + i];
        }
    for (int s = 0; s < B; s++)
        for (int i = 0; i < d; i++) {
            double acc = dy[(size_t)s * d + i];
            for (int o = 0; o < d; o++) acc += dy[(size_t)s * d + o] * x0[(size_t)s * d + o] * W[(size_t)o * d + i];
            dxl[(size_t)s * d + i] = acc;
        }
}

void nn_naive_cross_lowrank_forward(double *y, double *u, double *p, const double *x0, const double *xl,
                                    const double *U, const double *V, const double *b, int B, int d, int r) {
    for (int s = 0; s < B; s++)
        for (int k = 0; k < r; k++) {
            double acc = 0.0;
            for (int i = 0; i < d; i++) acc += xl[(size_t)s * d + i] * V[(size_t)i * r + k];
            p[(size_t)s * r + k] = acc;
        }
    nn_naive_linear_forward(u, p, U, b, B, r, d);
    for (size_t i = 0; i < (size_t)B * d; i++) y[i] = x0[i] * u[i] + xl[i];
}

void nn_naive_cross_lowrank_backward(double *dx0, double *dxl, double *dU, double *dV, double *db,
                                     const double *dy, const double *x0, const double *xl, const double *u,
                                     const double *p, const double *U, const double *V, int B, int d, int r) {
    for (int s = 0; s < B; s++) {
        const double *dys = dy + (size_t)s * d, *x0s = x0 + (size_t)s * d, *xls = xl + (size_t)s * d;
        double dp[r > 0 ? r : 1];
        for (int k = 0; k < r; k++) dp[k] = 0.0;
        for (int o = 0; o < d; o++) {
            double du = dys[o] * x0s[o];
            dx0[(size_t)s * d + o] += dys[o] * u[(size_t)s * d + o];
            db[o] += du;
            for (int k = 0; k < r; k++) {
                dU[(size_t)o * r + k] += du * p[(size_t)s * r + k];
                dp[k] += du * U[(size_t)o * r + k];
            }
        }
        for (int i = 0; i < d; i++) {
            double acc = dys[i];
            for (int k = 0; k < r; k++) {
                dV[(size_t)i * r + k] += xls[i] * dp[k];
                acc += dp[k] * V[(size_t)i * r + k];
            }
            dxl[(size_t)s * d + i] = acc;
        }
    }
}

void nn_naive_fm_forward(double *out, const double *emb, int B, int F, int D, int E) {
    // The pairwise definition, sum over f < g of <v_f, v_g>, rather than the (sum)^2 identity.
    for (int s = 0; s < B; s++) {
        double acc = 0.0;
        for (int f = 0; f < F; f++)
            for (int g = f + 1; g < F; g++)
                for (int k = 0; k < D; k++)
                    acc += emb[((size_t)s * F + f) * E + k] * emb[((size_t)s * F + g) * E + k];
        out[s] = acc;
    }
}

void nn_naive_fm_backward(double *demb, const double *dout, const double *emb, int B, int F, int D, int E) {
    for (int s = 0; s < B; s++)
        for (int f = 0; f < F; f++)
            for (int g = 0; g < F; g++) {
                if (g == f) continue;
                for (int k = 0; k < D; k++)
                    demb[((size_t)s * F + f) * E + k] += dout[s] * emb[((size_t)s * F + g) * E + k];
            }
}

void nn_naive_wide_forward(double *out, const double *dense, const double *emb, const double *w,
                           const double *bias, int B, int Nd, int F, int D, int E) {
    for (int s = 0; s < B; s++) {
        double acc = bias[0];
        for (int i = 0; i < Nd; i++) acc += w[i] * dense[(size_t)s * Nd + i];
        for (int f = 0; f < F; f++) acc += emb[((size_t)s * F + f) * E + D];
        out[s] = acc;
    }
}

void nn_naive_wide_backward(double *ddense, double *dw, double *dbias, double *demb, const double *dout,
                            const double *dense, const double *w, int B, int Nd, int F, int D, int E) {
    for (int s = 0; s < B; s++) {
        for (int i = 0; i < Nd; i++) {
            dw[i] += dout[s] * dense[(size_t)s * Nd + i];
            if (ddense) ddense[(size_t)s * Nd + i] += dout[s] * w[i];
        }
        dbias[0] += dout[s];
        for (int f = 0; f < F; f++) demb[((size_t)s * F + f) * E + D] += dout[s];
    }
}
