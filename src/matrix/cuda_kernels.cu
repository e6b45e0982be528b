// compnet's CUDA kernels, compiled at run time by NVRTC (src/matrix/cuda.rs), so that the
// crate builds on a machine without the CUDA toolkit. Each kernel is one matrix operation of
// src/matrix over whole operands; its element rule is the host code's, written again here.
// Matrices are row-major with a row stride; a launch covers columns with x and rows with y,
// and every loop strides by the grid so that any shape fits any grid.

typedef long long i64;

#define FOR_RC                                                                              \
  for (int r = blockIdx.y * blockDim.y + threadIdx.y; r < rows; r += gridDim.y * blockDim.y) \
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x)

// One element-wise kernel: x = expr, where v is x's element and OPERANDS/LOADS add the
// other matrices' parameters and elements (u of y, w of z, read transposed by EW2T); a and b
// are scalars. The parameter and load lists are macros so that their commas pass through.
#define ELEMENTWISE(name, OPERANDS, LOADS, expr)                                            \
  extern "C" __global__ void name(float* x, int sx, OPERANDS int rows, int cols, float a,  \
                                  float b) {                                               \
    FOR_RC {                                                                               \
      float v = x[(i64)r * sx + c];                                                        \
      (void)v;                                                                             \
      LOADS                                                                                \
      x[(i64)r * sx + c] = (expr);                                                         \
    }                                                                                      \
  }
#define NO_OPERANDS
#define NO_LOADS
#define Y_OPERAND const float *y, int sy,
#define Y_LOAD float u = y[(i64)r * sy + c];
#define YT_LOAD float u = y[(i64)c * sy + r];
#define YZ_OPERANDS const float *y, int sy, const float *z, int sz,
#define YZ_LOADS float u = y[(i64)r * sy + c]; float w = z[(i64)r * sz + c];

// x = f(x); x = f(x, y); x = f(x, yᵀ); x = f(x, y, z).
#define EW1(name, expr) ELEMENTWISE(name, NO_OPERANDS, NO_LOADS, expr)
#define EW2(name, expr) ELEMENTWISE(name, Y_OPERAND, Y_LOAD, expr)
#define EW2T(name, expr) ELEMENTWISE(name, Y_OPERAND, YT_LOAD, expr)
#define EW3(name, expr) ELEMENTWISE(name, YZ_OPERANDS, YZ_LOADS, expr)

// x = f(x, p[i]): p is a vector, read at i = c (one element per column) or i = r (per row);
// pi is that element.
#define EWV(name, i, expr)                                                                 \
  extern "C" __global__ void name(float* x, int sx, const float* p, int rows, int cols,   \
                                  float a, float b) {                                      \
    FOR_RC {                                                                               \
      float v = x[(i64)r * sx + c];                                                        \
      float pi = p[i];                                                                     \
      x[(i64)r * sx + c] = (expr);                                                         \
    }                                                                                      \
  }

// x = f(x, y, p[c]): y a matrix (u its element) and p a vector read per column (pi).
#define EWMV(name, expr)                                                                   \
  extern "C" __global__ void name(float* x, int sx, const float* y, int sy, const float* p, \
                                  int rows, int cols, float a, float b) {                  \
    FOR_RC {                                                                               \
      float v = x[(i64)r * sx + c];                                                        \
      float u = y[(i64)r * sy + c];                                                        \
      float pi = p[c];                                                                     \
      x[(i64)r * sx + c] = (expr);                                                         \
    }                                                                                      \
  }

__device__ __forceinline__ float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

EW1(k_set_const, a)
EW1(k_scale, v * a)
EW1(k_add_const, v + a)
EW1(k_floor, v < a ? a : v)
EW1(k_ceiling, v > a ? a : v)
EW1(k_exp, expf(v))
EW1(k_log, logf(v))
EW1(k_pow, powf(v, a))
EW1(k_heaviside, v > 0.0f ? 1.0f : 0.0f)
EW1(k_abs, fabsf(v))
EW1(k_sigmoid, sigmoidf(v))
EW1(k_tanh, tanhf(v))
EW1(k_sigmoid_deriv_from_output, v * (1.0f - v))
EW1(k_tanh_deriv_from_output, 1.0f - v * v)

EW2(k_copy, u)
EW2(k_add_mat, v + a * u)
EW2(k_add_mat_scaled, a * u + b * v)
EW2(k_mul, v * u)
EW2(k_div, v / u)
EW2(k_max_with, u > v ? u : v)
EW2(k_min_with, u < v ? u : v)
EW2(k_sigmoid_from, sigmoidf(u))
EW2(k_tanh_from, tanhf(u))
EW2(k_relu_from, u > 0.0f ? u : 0.0f)
EW2(k_diff_sigmoid_in_place, v * u * (1.0f - u))
EW2(k_diff_tanh_in_place, v * (1.0f - u * u))
EW2(k_diff_relu_in_place, u > 0.0f ? v : 0.0f)

EW2T(k_copy_t, u)
EW2T(k_add_mat_t, v + a * u)

EW3(k_add_mul, v + a * u * w)
EW3(k_mul_into, u * w)
EW3(k_diff_sigmoid, w * u * (1.0f - u))
EW3(k_diff_tanh, w * (1.0f - u * u))
EW3(k_diff_relu, u > 0.0f ? w : 0.0f)

EWV(k_add_vec_to_rows, c, a * pi + b * v)
EWV(k_add_vec_to_cols, r, b == 0.0f ? a * pi : a * pi + b * v)
EWV(k_mul_cols_vec, c, v * pi)
EWV(k_mul_rows_vec, r, v * pi)

EWMV(k_add_mat_diag_vec, b == 0.0f ? a * u * pi : a * u * pi + b * v)
EWMV(k_add_affine_mat_diag_vec, v + pi * (a * u + b))

// Per-block broadcasts (a row read as blocks of n columns, BatchNorm's reshape): p, q, s are
// vectors of n read at j = c % n, y a matrix of x's shape. mode 0: x·p; 1: x·p + q;
// 2: (x − p)·q; 3: (x + p)·q + y·s.
extern "C" __global__ void k_per_block(float* x, int sx, const float* y, int sy, const float* p,
                                       const float* q, const float* s, int n, int rows, int cols,
                                       int mode) {
  FOR_RC {
    int j = c % n;
    float v = x[(i64)r * sx + c];
    float out;
    if (mode == 0) {
      out = v * p[j];
    } else if (mode == 1) {
      out = v * p[j] + q[j];
    } else if (mode == 2) {
      out = (v - p[j]) * q[j];
    } else {
      out = (v + p[j]) * q[j] + y[(i64)r * sy + c] * s[j];
    }
    x[(i64)r * sx + c] = out;
  }
}

// Per block column j < n, over every row and block in row order (as the host sums): mode 0,
// a = Σ x and b = Σ x²; mode 1, a = Σ x·y and b = Σ y. One thread per j.
extern "C" __global__ void k_block_col_stats(float* a, float* b, const float* x, int sx,
                                             const float* y, int sy, int n, int rows, int cols,
                                             int mode) {
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < n; j += gridDim.x * blockDim.x) {
    float sa = 0.0f, sb = 0.0f;
    for (int r = 0; r < rows; r++) {
      for (int c = j; c < cols; c += n) {
        float u = x[(i64)r * sx + c];
        if (mode == 0) {
          sa += u;
          sb += u * u;
        } else {
          float w = y[(i64)r * sy + c];
          sa += u * w;
          sb += w;
        }
      }
    }
    a[j] = sa;
    b[j] = sb;
  }
}

// The LSTM cell (Kaldi's ComputeLstmNonlinearity), one thread per (row, unit c < C = cols):
// input row [i, f, g, o, c_prev] (C each, then the three dropout scales i, f, o when
// dropout), peephole weights w (3 × C, row stride sw), output row [c_t, m_t].
extern "C" __global__ void k_lstm_cell(float* x, int sx, const float* in, int si, const float* w,
                                       int sw, int rows, int cols, int dropout) {
  FOR_RC {
    const float* row = in + (i64)r * si;
    int C = cols;
    float c_prev = row[4 * C + c];
    float is = 1.0f, fs = 1.0f, os = 1.0f;
    if (dropout) {
      is = row[5 * C];
      fs = row[5 * C + 1];
      os = row[5 * C + 2];
    }
    float i_t = sigmoidf(row[c] + w[c] * c_prev);
    float f_t = sigmoidf(row[C + c] + w[sw + c] * c_prev);
    float c_t = f_t * fs * c_prev + i_t * is * tanhf(row[2 * C + c]);
    float o_t = sigmoidf(row[3 * C + c] + w[2 * sw + c] * c_t);
    x[(i64)r * sx + c] = c_t;
    x[(i64)r * sx + C + c] = o_t * os * tanhf(c_t);
  }
}

// The GRU cell from its pre-activation, one thread per (row, unit c < C = cols): x is
// [h, c] with the pre-activation in h on entry; h = tanh(pre), c = (1 − z)·h + z·c_prev.
extern "C" __global__ void k_gru_cell(float* x, int sx, const float* z, int sz, const float* cp,
                                      int scp, int rows, int cols) {
  FOR_RC {
    float t = tanhf(x[(i64)r * sx + c]);
    float zz = z[(i64)r * sz + c];
    x[(i64)r * sx + c] = t;
    x[(i64)r * sx + cols + c] = (t + -zz * t) + zz * cp[(i64)r * scp + c];
  }
}

// The output-GRU cell: input row [z, hpart, c_prev] (C each), per-unit weights w;
// h = tanh(hpart + w·c_prev), c as in k_gru_cell; x is [h, c].
extern "C" __global__ void k_output_gru_cell(float* x, int sx, const float* in, int si,
                                             const float* w, int rows, int cols) {
  FOR_RC {
    const float* row = in + (i64)r * si;
    float zz = row[c], cpv = row[2 * cols + c];
    float t = tanhf(cpv * w[c] + row[cols + c]);
    x[(i64)r * sx + c] = t;
    x[(i64)r * sx + cols + c] = (t + -zz * t) + zz * cpv;
  }
}

// The LSTM cell's backward pass (Kaldi's BackpropLstmNonlinearity), the forward recomputed
// from the input row as in k_lstm_cell. One thread per unit j < C and chunk of `chunk` rows,
// so that the per-unit sums need no atomics: od is [dc_t, dm_t], sr the 5 × C self-repair
// terms. With want_in, writes the input derivative's first 5C columns into id and, with
// dropout, the unit's three dropout-scale terms into st (rows × 3C; k_lstm_scale_sums adds
// them per row). Always writes the chunk's 13 sums, in double, to part[(ch·13 + k)·C + j]: the
// five nonlinearities' values (k < 5) and derivatives (5 ≤ k < 10), then the three peephole
// terms.
extern "C" __global__ void k_lstm_backprop(float* id, int sid, float* st, int sst, double* part,
                                           const float* in, int si, const float* w, int sw,
                                           const float* od, int sod, const float* sr, int rows,
                                           int C, int chunk, int dropout, int want_in) {
  int chunks = (rows + chunk - 1) / chunk;
  for (int ch = blockIdx.y; ch < chunks; ch += gridDim.y) {
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < C; j += gridDim.x * blockDim.x) {
      float wi = w[j], wf = w[sw + j], wo = w[2 * sw + j];
      float sr0 = sr[j], sr1 = sr[C + j], sr2 = sr[2 * C + j], sr3 = sr[3 * C + j],
            sr4 = sr[4 * C + j];
      double s[13];
#pragma unroll
      for (int k = 0; k < 13; k++) s[k] = 0.0;
      int end = min(rows, (ch + 1) * chunk);
      for (int r = ch * chunk; r < end; r++) {
        const float* row = in + (i64)r * si;
        float is = 1.0f, fs = 1.0f, os = 1.0f;
        if (dropout) {
          is = row[5 * C];
          fs = row[5 * C + 1];
          os = row[5 * C + 2];
        }
        float c_prev = row[4 * C + j];
        float i_t = sigmoidf(row[j] + wi * c_prev);
        float f_t = sigmoidf(row[C + j] + wf * c_prev);
        float tcp = tanhf(row[2 * C + j]);
        float c_t = f_t * fs * c_prev + i_t * is * tcp;
        float o_t = sigmoidf(row[3 * C + j] + wo * c_t);
        float tct = tanhf(c_t);
        float dc_out = od[(i64)r * sod + j], dm = od[(i64)r * sod + C + j];
        float do_t = dm * os * tct;
        float dtct = dm * o_t * os;
        float do_in = o_t * (1.0f - o_t) * do_t - (2.0f * o_t - 1.0f) * sr3;
        float dc = dc_out + (1.0f - tct * tct) * dtct - 2.0f * tct * sr4 + do_in * wo;
        float df_t = dc * fs * c_prev;
        float di_t = dc * is * tcp;
        float dtcp = dc * i_t * is;
        float df_in = f_t * (1.0f - f_t) * df_t - (2.0f * f_t - 1.0f) * sr1;
        float di_in = i_t * (1.0f - i_t) * di_t - (2.0f * i_t - 1.0f) * sr0;
        float dc_part = (1.0f - tcp * tcp) * dtcp - 2.0f * tcp * sr2;
        s[0] += i_t;
        s[1] += f_t;
        s[2] += tcp;
        s[3] += o_t;
        s[4] += tct;
        s[5] += i_t * (1.0f - i_t);
        s[6] += f_t * (1.0f - f_t);
        s[7] += 1.0f - tcp * tcp;
        s[8] += o_t * (1.0f - o_t);
        s[9] += 1.0f - tct * tct;
        s[10] += di_in * c_prev;
        s[11] += df_in * c_prev;
        s[12] += do_in * c_t;
        if (want_in) {
          float* g = id + (i64)r * sid;
          g[j] = di_in;
          g[C + j] = df_in;
          g[2 * C + j] = dc_part;
          g[3 * C + j] = do_in;
          g[4 * C + j] = dc * f_t * fs + di_in * wi + df_in * wf;
          if (dropout) {
            float* t = st + (i64)r * sst;
            t[j] = dc * i_t * tcp;
            t[C + j] = dc * f_t * c_prev;
            t[2 * C + j] = dm * o_t * tct;
          }
        }
      }
#pragma unroll
      for (int k = 0; k < 13; k++) part[((i64)ch * 13 + k) * C + j] = s[k];
    }
  }
}

// The LSTM's dropout-scale derivatives: id[r][5C + k] = Σ_j st[r][k·C + j], in unit order as
// the host adds them; one thread per (row, k < cols = 3).
extern "C" __global__ void k_lstm_scale_sums(float* id, int sid, const float* st, int sst,
                                             int rows, int cols, int C) {
  FOR_RC {
    const float* t = st + (i64)r * sst + (i64)c * C;
    float s = 0.0f;
    for (int j = 0; j < C; j++) s += t[j];
    id[(i64)r * sid + 5 * C + c] = s;
  }
}

// part[i] = Σ_p part[p·n + i] over the `parts` rows of partial sums, in order (row 0 holds the
// total afterwards); one thread per i.
extern "C" __global__ void k_sum_parts(double* part, int parts, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    double s = part[i];
    for (int p = 1; p < parts; p++) s += part[(i64)p * n + i];
    part[i] = s;
  }
}

// The GRU cell's backward pass through the interpolation and the tanh, one thread per (row,
// unit c < C = cols): h, hod, cd are the forward h and the derivatives of h and c; hd =
// (hod + cd − cd·z)(1 − h²). With add_inputs, id's columns zc and cpc (the z and c_prev
// derivatives) get += cd·(c_prev − h) (as −cd·h + cd·c_prev) and += cd·z. The products are
// rounded on their own (no fused multiply-add), as on the host, so the result is the host's
// to the bit.
extern "C" __global__ void k_gru_backprop(float* hd, int shd, float* id, int sid, int zc, int cpc,
                                          int add_inputs, const float* h, int sh, const float* od,
                                          int sod, const float* z, int sz, const float* cp,
                                          int scp, int rows, int cols) {
  FOR_RC {
    float hv = h[(i64)r * sh + c];
    float hod = od[(i64)r * sod + c], cd = od[(i64)r * sod + cols + c];
    float zv = z[(i64)r * sz + c];
    if (add_inputs) {
      float* g = id + (i64)r * sid;
      float cpv = cp[(i64)r * scp + c];
      g[zc + c] = __fadd_rn(__fadd_rn(__fmul_rn(-cd, hv), g[zc + c]), __fmul_rn(cd, cpv));
      g[cpc + c] = __fadd_rn(g[cpc + c], __fmul_rn(cd, zv));
    }
    float d = __fadd_rn(__fadd_rn(hod, cd), __fmul_rn(-cd, zv));
    hd[(i64)r * shd + c] = __fmul_rn(d, __fsub_rn(1.0f, __fmul_rn(hv, hv)));
  }
}

__device__ __forceinline__ float signf(float x) { return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f); }

// Grouped reductions over consecutive groups of g columns (Kaldi's GroupPnorm, GroupMax):
// x (rows × cols) from y (rows × cols·g), one thread per output element, the group summed
// in column order as on the host. p = ∞ gives the largest |y|, p = 0 counts non-zeros.
extern "C" __global__ void k_group_pnorm(float* x, int sx, const float* y, int sy, int g,
                                         int rows, int cols, float p) {
  FOR_RC {
    const float* s = y + (i64)r * sy + (i64)c * g;
    float acc = 0.0f;
    if (p == 2.0f) {
      for (int k = 0; k < g; k++) acc += s[k] * s[k];
      acc = sqrtf(acc);
    } else if (p == 1.0f) {
      for (int k = 0; k < g; k++) acc += fabsf(s[k]);
    } else if (isinf(p) && p > 0.0f) {
      for (int k = 0; k < g; k++) acc = fmaxf(acc, fabsf(s[k]));
    } else if (p == 0.0f) {
      for (int k = 0; k < g; k++) acc += s[k] != 0.0f ? 1.0f : 0.0f;
    } else {
      for (int k = 0; k < g; k++) acc += powf(fabsf(s[k]), p);
      acc = powf(acc, 1.0f / p);
    }
    x[(i64)r * sx + c] = acc;
  }
}

extern "C" __global__ void k_group_max(float* x, int sx, const float* y, int sy, int g, int rows,
                                       int cols, float unused) {
  FOR_RC {
    const float* s = y + (i64)r * sy + (i64)c * g;
    float m = __int_as_float(0xff800000);  // −∞
    for (int k = 0; k < g; k++) m = fmaxf(m, s[k]);
    x[(i64)r * sx + c] = m;
  }
}

// Their input derivatives, one thread per input element (rows × cols, groups of g): iv the
// input value, ov and od the output value and derivative of the element's group. mode 0:
// p-norm (p); 1: the 2-norm as x · (od / y); 2: GroupMax's 0/1 mask (od unused).
extern "C" __global__ void k_group_deriv(float* x, int sx, const float* iv, int si,
                                         const float* ov, int so, const float* od, int sd, int g,
                                         int rows, int cols, float p, int mode) {
  FOR_RC {
    float xv = iv[(i64)r * si + c];
    int j = c / g;
    float y = ov[(i64)r * so + j];
    float out;
    if (mode == 2) {
      out = xv == y ? 1.0f : 0.0f;
    } else {
      float d = od[(i64)r * sd + j];
      if (mode == 1) {
        out = xv * (y != 0.0f ? d / y : 0.0f);
      } else if (y == 0.0f) {
        out = 0.0f;
      } else if (p == 2.0f) {
        out = d * xv / y;
      } else if (p == 1.0f) {
        out = d * signf(xv);
      } else if (isinf(p) && p > 0.0f) {
        out = fabsf(xv) == y ? d * signf(xv) : 0.0f;
      } else {
        out = d * signf(xv) * powf(fabsf(xv), p - 1.0f) * powf(y, 1.0f - p);
      }
    }
    x[(i64)r * sx + c] = out;
  }
}

// Row gathers by an index table (−1: zero, or leave).
extern "C" __global__ void k_copy_rows(float* x, int sx, const float* y, int sy, const int* idx,
                                       int rows, int cols) {
  FOR_RC {
    int j = idx[r];
    x[(i64)r * sx + c] = j < 0 ? 0.0f : y[(i64)j * sy + c];
  }
}

extern "C" __global__ void k_add_rows(float* x, int sx, const float* y, int sy, const int* idx,
                                      int rows, int cols, float a) {
  FOR_RC {
    int j = idx[r];
    if (j >= 0) x[(i64)r * sx + c] += a * y[(i64)j * sy + c];
  }
}

// Row scatters: rows counts the source rows; a destination row may be named twice, so the
// adding form adds atomically.
extern "C" __global__ void k_copy_to_rows(float* x, int sx, const float* y, int sy,
                                          const int* idx, int rows, int cols) {
  FOR_RC {
    int j = idx[r];
    if (j >= 0) x[(i64)j * sx + c] = y[(i64)r * sy + c];
  }
}

extern "C" __global__ void k_add_to_rows(float* x, int sx, const float* y, int sy,
                                         const int* idx, int rows, int cols, float a) {
  FOR_RC {
    int j = idx[r];
    if (j >= 0) atomicAdd(&x[(i64)j * sx + c], a * y[(i64)r * sy + c]);
  }
}

// out[c] = a · Σ_r m[r, c] + b · out[c]: one thread per column, rows summed in order (in
// double, as the host sums them).
// out[c] = a · Σ_r f(m[r][c]) (+ b · out[c]), f(x) = x (square = 0) or x² (square = 1).
// Blocks of 32 × 32 threads: each block owns 32 columns, its 32 thread rows stride over the
// rows with double sums, which are then added in a fixed order (reproducible to the bit).
extern "C" __global__ void k_add_row_sum(float* out, const float* m, int sm, int rows, int cols,
                                         float a, float b, int square) {
  __shared__ double part[32][33];
  int c = blockIdx.x * 32 + threadIdx.x;
  double s = 0.0;
  if (c < cols) {
    for (int r = threadIdx.y; r < rows; r += 32) {
      double v = m[(i64)r * sm + c];
      s += square ? v * v : v;
    }
  }
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    double t = 0.0;
    for (int i = 0; i < 32; ++i) t += part[i][threadIdx.x];
    out[c] = b == 0.0f ? a * (float)t : a * (float)t + b * out[c];
  }
}

// A block's reduction of one value per thread (blockDim.x a power of two ≤ 1024).
__device__ float block_reduce(float v, float* scratch, bool take_max) {
  int t = threadIdx.x;
  scratch[t] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) {
      float o = scratch[t + s];
      scratch[t] = take_max ? (o > scratch[t] ? o : scratch[t]) : scratch[t] + o;
    }
    __syncthreads();
  }
  float r = scratch[0];
  __syncthreads();
  return r;
}

// out[r] = a · Σ_c m[r, c] + b · out[r]: one block per row.
extern "C" __global__ void k_add_col_sum(float* out, const float* m, int sm, int rows, int cols,
                                         float a, float b) {
  extern __shared__ float scratch[];
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += m[(i64)r * sm + c];
    s = block_reduce(s, scratch, false);
    if (threadIdx.x == 0) out[r] = b == 0.0f ? a * s : a * s + b * out[r];
  }
}

// Softmax and log-softmax of each row of y into x (x may be y): one block per row.
extern "C" __global__ void k_softmax_rows(float* x, int sx, const float* y, int sy, int rows,
                                          int cols, int log_form) {
  extern __shared__ float scratch[];
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* yr = y + (i64)r * sy;
    float* xr = x + (i64)r * sx;
    float m = -__int_as_float(0x7f800000);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) m = yr[c] > m ? yr[c] : m;
    m = block_reduce(m, scratch, true);
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += expf(yr[c] - m);
    s = block_reduce(s, scratch, false);
    if (log_form) {
      float lse = m + logf(s);
      for (int c = threadIdx.x; c < cols; c += blockDim.x) xr[c] = yr[c] - lse;
    } else {
      for (int c = threadIdx.x; c < cols; c += blockDim.x) xr[c] = expf(yr[c] - m) / s;
    }
  }
}

// Backward of log-softmax per row: x = d − exp(y) · Σ d (value y, output derivative d; x may
// be d). Backward of softmax: x = y ⊙ (d − y·d).
extern "C" __global__ void k_diff_softmax_rows(float* x, int sx, const float* y, int sy,
                                               const float* d, int sd, int rows, int cols,
                                               int log_form) {
  extern __shared__ float scratch[];
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* yr = y + (i64)r * sy;
    const float* dr = d + (i64)r * sd;
    float* xr = x + (i64)r * sx;
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += log_form ? dr[c] : dr[c] * yr[c];
    s = block_reduce(s, scratch, false);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
      float dv = dr[c];
      xr[c] = log_form ? dv - expf(yr[c]) * s : yr[c] * (dv - s);
    }
  }
}

// Kaldi's NormalizePerRow over blocks of bd columns: one thread block per (row, block).
// x's blocks are bd (+1 with add_log: the log RMS) wide; x may be y (then add_log is 0).
#define SQUARED_NORM_FLOOR 1.3552527e-20f
extern "C" __global__ void k_normalize(float* x, int sx, const float* y, int sy, int rows,
                                       int nblocks, int bd, int add_log, float d_scaled,
                                       float log_target) {
  extern __shared__ float scratch[];
  for (int rb = blockIdx.x; rb < rows * nblocks; rb += gridDim.x) {
    int r = rb / nblocks, b = rb % nblocks;
    const float* yb = y + (i64)r * sy + (i64)b * bd;
    float* xb = x + (i64)r * sx + (i64)b * (bd + add_log);
    float s = 0.0f;
    for (int c = threadIdx.x; c < bd; c += blockDim.x) s += yb[c] * yb[c];
    s = block_reduce(s, scratch, false);
    float ms = s * (1.0f / d_scaled);
    float f = powf(ms > SQUARED_NORM_FLOOR ? ms : SQUARED_NORM_FLOOR, -0.5f);
    for (int c = threadIdx.x; c < bd; c += blockDim.x) xb[c] = yb[c] * f;
    if (add_log && threadIdx.x == 0) xb[bd] = -logf(f) + log_target;
  }
}

// Kaldi's DiffNormalizePerRow: x (bd-wide blocks) += the input derivative from the input
// value v and output derivative d (bd + add_log wide blocks); with overwrite, d is x itself
// (no log column) and x is replaced.
extern "C" __global__ void k_diff_normalize(float* x, int sx, const float* v, int sv,
                                            const float* d, int sd, int rows, int nblocks,
                                            int bd, int add_log, float d_scaled, int overwrite) {
  extern __shared__ float scratch[];
  for (int rb = blockIdx.x; rb < rows * nblocks; rb += gridDim.x) {
    int r = rb / nblocks, b = rb % nblocks;
    const float* vb = v + (i64)r * sv + (i64)b * bd;
    const float* db = d + (i64)r * sd + (i64)b * (bd + add_log);
    float* xb = x + (i64)r * sx + (i64)b * bd;
    float dot = 0.0f, ss = 0.0f;
    for (int c = threadIdx.x; c < bd; c += blockDim.x) {
      dot += db[c] * vb[c];
      ss += vb[c] * vb[c];
    }
    dot = block_reduce(dot, scratch, false);
    ss = block_reduce(ss, scratch, false);
    float floor_ss = bd * SQUARED_NORM_FLOOR;
    float coef = add_log ? db[bd] / (ss > floor_ss ? ss : floor_ss) : 0.0f;
    float ms = ss * (1.0f / d_scaled);
    bool floored = !(ms > SQUARED_NORM_FLOOR);
    float f = powf(floored ? SQUARED_NORM_FLOOR : ms, -0.5f);
    float cc = floored ? 0.0f : -dot * f * f * f / d_scaled;
    for (int c = threadIdx.x; c < bd; c += blockDim.x) {
      float o = db[c], xv = vb[c];
      float t = overwrite ? 0.0f : xb[c];
      if (add_log) t += coef * xv;
      xb[c] = t + (f * o + cc * xv);
    }
  }
}

// Per-row sums in double into out[r]: mode 0 Σ x·y, 1 Σ x, 2 Σ x². The host adds the rows
// in order (the whole-matrix reductions: sums, traces, norms).
extern "C" __global__ void k_row_reduce(double* out, const float* x, int sx, const float* y,
                                        int sy, int rows, int cols, int mode) {
  extern __shared__ float scratch[];
  double* ds = reinterpret_cast<double*>(scratch);
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    double s = 0.0;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
      double a = x[(i64)r * sx + c];
      s += mode == 0 ? a * (double)y[(i64)r * sy + c] : mode == 1 ? a : a * a;
    }
    int t = threadIdx.x;
    ds[t] = s;
    __syncthreads();
    for (int h = blockDim.x / 2; h > 0; h >>= 1) {
      if (t < h) ds[t] += ds[t + h];
      __syncthreads();
    }
    if (t == 0) out[r] = ds[0];
    __syncthreads();
  }
}

// m[r][c] += a · v for each element (r, c, v) of `el`, given as three ints (v's float bits);
// the callers pass no (r, c) twice, so the order of the additions does not matter.
extern "C" __global__ void k_add_elements(float* m, int sm, const int* el, int n, float a) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const int* e = el + 3 * i;
    m[(i64)e[0] * sm + e[1]] += a * __int_as_float(e[2]);
  }
}

// out[i] = v · m[r][c] (in double) for each element (r, c, v) of `el`; the host adds the
// products in order.
extern "C" __global__ void k_dot_elements(double* out, const float* m, int sm, const int* el,
                                          int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const int* e = el + 3 * i;
    out[i] = (double)__int_as_float(e[2]) * (double)m[(i64)e[0] * sm + e[1]];
  }
}

// Restricted self-attention (src/matrix/attention.rs, attention_backprop.rs): output row i
// attends to the input rows r_o = i + o·shift, o < C. These kernels run in blocks of whole
// warps: a warp adds up one dot product over its lanes, then across them by shuffles (every
// lane ends with the total).
__device__ __forceinline__ float warp_sum(float v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int off = 16; off > 0; off >>= 1) {
    float o = __shfl_xor_sync(0xffffffffu, v, off);
    v = o > v ? o : v;
  }
  return v;
}

// The softmax of s[0..C) in place, by one whole warp (lane its lane): max first, so that no
// exp overflows.
__device__ void warp_softmax(float* s, int C, int lane) {
  float m = __int_as_float(0xff800000);  // −∞
  for (int o = lane; o < C; o += 32) m = s[o] > m ? s[o] : m;
  m = warp_max(m);
  float sum = 0.0f;
  for (int o = lane; o < C; o += 32) {
    float e = expf(s[o] - m);
    s[o] = e;
    sum += e;
  }
  sum = warp_sum(sum);
  for (int o = lane; o < C; o += 32) s[o] = s[o] / sum;
}

// One head forward (MatViewMut::add_restricted_attention), one block per output row i:
// b_o = key_scale · q_i[..kd] · key(r_o) + q_i[kd + o] (a warp per position), c = softmax(b)
// into wt, out_i[..vd] += Σ_o c_o · value(r_o) (a thread per column, positions in order),
// and out_i[vd + o] += c_o when out has C more columns. The input rows are keys (kd) then
// values (vd); dynamic shared memory holds the C weights.
extern "C" __global__ void k_attention_head(float* out, int so, int out_cols, float* wt, int sw,
                                            const float* q, int sq, const float* in, int si,
                                            int rows, int shift, int C, int kd, int vd,
                                            float key_scale) {
  extern __shared__ float w[];
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int i = blockIdx.x; i < rows; i += gridDim.x) {
    const float* qi = q + (i64)i * sq;
    const float* win = in + (i64)i * si;
    for (int o = warp; o < C; o += warps) {
      const float* k = win + (i64)o * shift * si;
      float s = 0.0f;
      for (int j = lane; j < kd; j += 32) s += qi[j] * k[j];
      s = warp_sum(s);
      if (lane == 0) w[o] = key_scale * s + qi[kd + o];
    }
    __syncthreads();
    if (warp == 0) warp_softmax(w, C, lane);
    __syncthreads();
    float* yi = out + (i64)i * so;
    for (int o = threadIdx.x; o < C; o += blockDim.x) {
      wt[(i64)i * sw + o] = w[o];
      if (out_cols > vd) yi[vd + o] += w[o];
    }
    for (int j = threadIdx.x; j < vd; j += blockDim.x) {
      float y = yi[j];
      for (int o = 0; o < C; o++) y += w[o] * win[(i64)o * shift * si + kd + j];
      yi[j] = y;
    }
    // The weights are rewritten for the block's next row.
    __syncthreads();
  }
}

// Restricted attention backward (MatViewMut::add_restricted_attention_backprop), in two
// kernels so that every derivative element has exactly one writer and no atomics are needed.
// Per head the input and derivative columns are key (kd), value (vd), query key (kd), query
// context (C); od has vd (+ C with ctx) columns per head, wt and db C.
//
// 1. One block per (output row i, head): dc_o = od_i[..vd] · value(r_o) (+ od_i[vd + o]),
//    db_o = c_o · (dc_o − Σ_p c_p · dc_p) into the scratch db, and the terms of the query
//    row rows_left + i, whose query columns no other output row reaches:
//    query context += db, query key += Σ_o (key_scale · db_o) · key(r_o) (positions in order).
extern "C" __global__ void k_attention_backprop_db(float* d, int sd, float* db, int sdb,
                                                   const float* in, int si, const float* wt,
                                                   int sw, const float* od, int sod, int rows,
                                                   int rows_left, int shift, int heads, int C,
                                                   int kd, int vd, int ctx, float key_scale) {
  extern __shared__ float sh[];
  float* dc = sh;
  float* b = sh + C;
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  int hc = 2 * kd + vd + C, odc = vd + (ctx ? C : 0);
  for (int u = blockIdx.x; u < rows * heads; u += gridDim.x) {
    int i = u / heads, h = u % heads;
    const float* win = in + (i64)i * si + (i64)h * hc;
    const float* odi = od + (i64)i * sod + (i64)h * odc;
    const float* ci = wt + (i64)i * sw + (i64)h * C;
    for (int o = warp; o < C; o += warps) {
      const float* v = win + (i64)o * shift * si + kd;
      float s = 0.0f;
      for (int j = lane; j < vd; j += 32) s += odi[j] * v[j];
      s = warp_sum(s);
      if (lane == 0) dc[o] = ctx ? s + odi[vd + o] : s;
    }
    __syncthreads();
    float* qd = d + (i64)(rows_left + i) * sd + (i64)h * hc;
    if (warp == 0) {
      float cdc = 0.0f;
      for (int o = lane; o < C; o += 32) cdc += ci[o] * dc[o];
      cdc = warp_sum(cdc);
      for (int o = lane; o < C; o += 32) {
        float x = ci[o] * (dc[o] - cdc);
        db[(i64)i * sdb + (i64)h * C + o] = x;
        qd[2 * kd + vd + o] += x;
        b[o] = key_scale * x;
      }
    }
    __syncthreads();
    for (int j = threadIdx.x; j < kd; j += blockDim.x) {
      float acc = 0.0f;
      for (int o = 0; o < C; o++) acc += b[o] * win[(i64)o * shift * si + j];
      qd[kd + vd + j] += acc;
    }
    // dc and b are rewritten for the block's next (row, head).
    __syncthreads();
  }
}

// 2. One thread per (input row r, head, key or value column j): the terms of every output row
//    i = r − o·shift < rows whose window holds r, added up in increasing i, then added once:
//    key(r) += Σ (key_scale · db_io) · query key_i, value(r) += Σ c_io · od_i[..vd]. A
//    thread owns its element, so the sum needs no atomics and its order is fixed.
extern "C" __global__ void k_attention_backprop_kv(float* d, int sd, const float* in, int si,
                                                   const float* db, int sdb, const float* wt,
                                                   int sw, const float* od, int sod, int rows,
                                                   int rows_in, int rows_left, int shift,
                                                   int heads, int C, int kd, int vd, int ctx,
                                                   float key_scale) {
  int hc = 2 * kd + vd + C, odc = vd + (ctx ? C : 0), kv = kd + vd;
  int cols = heads * kv;
  for (int r = blockIdx.y * blockDim.y + threadIdx.y; r < rows_in; r += gridDim.y * blockDim.y)
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x) {
      int h = c / kv, j = c % kv;
      float acc = 0.0f;
      // o downwards: the output rows upwards.
      for (int o = C - 1; o >= 0; o--) {
        int i = r - o * shift;
        if (i < 0 || i >= rows) continue;
        if (j < kd) {
          float s = key_scale * db[(i64)i * sdb + (i64)h * C + o];
          acc += s * in[(i64)(rows_left + i) * si + (i64)h * hc + kv + j];
        } else {
          acc += wt[(i64)i * sw + (i64)h * C + o] * od[(i64)i * sod + (i64)h * odc + j - kd];
        }
      }
      d[(i64)r * sd + (i64)h * hc + j] += acc;
    }
}

// Sums of products below are written with __fmul_rn / __fadd_rn so that NVRTC does not fuse
// them into one multiply-add: the host rounds the product first, and these kernels add in the
// host's order, so they agree with it to the bit.

// Column gather (CopyCols): x[r, c] = y[r, idx[c]], or 0 where idx[c] = −1.
extern "C" __global__ void k_copy_cols(float* x, int sx, const float* y, int sy, const int* idx,
                                       int rows, int cols) {
  FOR_RC {
    int j = idx[c];
    x[(i64)r * sx + c] = j < 0 ? 0.0f : y[(i64)r * sy + j];
  }
}

// Column scatter (add_to_cols): x[r, c] += y[r, j] for every j with idx[j] = c. inv lists,
// per destination column c, those j in increasing order (inv[c] .. inv[c + 1] index the list
// that starts at inv + cols + 1), so one thread owns each destination and adds in the
// host's order: no races, no atomics.
extern "C" __global__ void k_add_to_cols(float* x, int sx, const float* y, int sy, const int* inv,
                                         int rows, int cols) {
  const int* list = inv + cols + 1;
  FOR_RC {
    float a = x[(i64)r * sx + c];
    for (int q = inv[c]; q < inv[c + 1]; q++) a = __fadd_rn(a, y[(i64)r * sy + list[q]]);
    x[(i64)r * sx + c] = a;
  }
}

// Unfold (copy_blocks_outer): x has rows = row groups × groups and cols = slots × block;
// x[r, s·block + k] = y[rt[(r / groups)·slots + s], ct[(r % groups)·slots + s] + k], or 0
// where either index is −1.
extern "C" __global__ void k_copy_blocks_outer(float* x, int sx, const float* y, int sy,
                                               const int* rt, const int* ct, int rows, int cols,
                                               int block, int groups) {
  int slots = cols / block;
  FOR_RC {
    int s = c / block;
    int j = rt[(r / groups) * slots + s], c0 = ct[(r % groups) * slots + s];
    x[(i64)r * sx + c] = j < 0 || c0 < 0 ? 0.0f : y[(i64)j * sy + c0 + (c - s * block)];
  }
}

// Fold (add_blocks_outer_to), the transpose of k_copy_blocks_outer: x (the source shape,
// rows × cols) += alpha · the blocks of y that were gathered from it. Blocks may overlap, so
// each thread owns one element of x and finds its contributions through two inverse tables:
// rinv, per x row, the row groups q whose table rt names it in some slot (increasing); cinv,
// per x column, the (g·slots + s) whose block covers it (increasing). A pair contributes when
// rt[q·slots + s] names this row; looping q, then (g, s) visits the y rows q·groups + g and
// slots s in the host's order.
extern "C" __global__ void k_add_blocks_outer_to(float* x, int sx, const float* y, int sy,
                                                 const int* rt, const int* ct, const int* rinv,
                                                 const int* cinv, int rows, int cols, int block,
                                                 int groups, int slots, float alpha) {
  const int* rlist = rinv + rows + 1;
  const int* clist = cinv + cols + 1;
  FOR_RC {
    float a = x[(i64)r * sx + c];
    for (int p = rinv[r]; p < rinv[r + 1]; p++) {
      int q = rlist[p];
      for (int t = cinv[c]; t < cinv[c + 1]; t++) {
        int gs = clist[t];
        int g = gs / slots, s = gs - g * slots;
        if (rt[q * slots + s] != r) continue;
        float v = y[(i64)(q * groups + g) * sy + s * block + (c - ct[gs])];
        a = __fadd_rn(a, __fmul_rn(alpha, v));
      }
    }
    x[(i64)r * sx + c] = a;
  }
}

// StatisticsExtraction forward: x row r (cols = 1 + d, + d with the squares) adds
// [count, Σ y, Σ y²] over y rows rg[2r] .. rg[2r + 1], one thread per output element, the
// rows added in order onto x's value as on the host.
extern "C" __global__ void k_add_row_range_stats(float* x, int sx, const float* y, int sy,
                                                 const int* rg, int rows, int cols, int d) {
  FOR_RC {
    int s = rg[2 * r], e = rg[2 * r + 1];
    float a = x[(i64)r * sx + c];
    if (c == 0) {
      a = __fadd_rn(a, (float)(e - s));
    } else if (c <= d) {
      for (int i = s; i < e; i++) a = __fadd_rn(a, y[(i64)i * sy + c - 1]);
    } else {
      for (int i = s; i < e; i++) {
        float v = y[(i64)i * sy + c - 1 - d];
        a = __fadd_rn(a, __fmul_rn(v, v));
      }
    }
    x[(i64)r * sx + c] = a;
  }
}

// Its backward pass into x (input rows × d): input row r takes the Σy derivative of the last
// output row whose range holds it (owner[r], −1: none, row left alone), as the host's
// overwriting loop leaves it, plus 2·v·(Σy² derivative) with the input value v (with_v).
extern "C" __global__ void k_backprop_row_range_stats(float* x, int sx, const float* od, int so,
                                                      const float* v, int sv, const int* owner,
                                                      int rows, int cols, int with_v) {
  FOR_RC {
    int o = owner[r];
    if (o < 0) continue;
    float g = od[(i64)o * so + 1 + c];
    if (with_v) {
      float dq = od[(i64)o * so + 1 + cols + c];
      g = __fadd_rn(g, __fmul_rn(2.0f * v[(i64)r * sv + c], dq));
    }
    x[(i64)r * sx + c] = g;
  }
}

// pre[(i + 1)·cols + c] = Σ_{i' ≤ i} y[i', c] in double, pre[c] = 0: one thread per column,
// rows in order (the host's prefix sums for long pooling windows).
extern "C" __global__ void k_prefix_cols(double* pre, const float* y, int sy, int rows,
                                         int cols) {
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x) {
    double p = 0.0;
    pre[c] = p;
    for (int i = 0; i < rows; i++) {
      p += (double)y[(i64)i * sy + c];
      pre[(i64)(i + 1) * cols + c] = p;
    }
  }
}

// Σ of y's column c over rows s .. e: from the prefix sums (ycols wide) when given, else
// added in row order in float.
__device__ float range_sum(const float* y, int sy, const double* pre, int ycols, int s, int e,
                           int c) {
  if (pre) return (float)(pre[(i64)e * ycols + c] - pre[(i64)s * ycols + c]);
  float a = 0.0f;
  for (int i = s; i < e; i++) a = __fadd_rn(a, y[(i64)i * sy + c]);
  return a;
}

// StatisticsPooling forward: x row r = [log(count) × nl, mean, (stddev)] of the extraction
// statistics y ([count, Σ, Σ²] rows) over rows rg[2r] .. rg[2r + 1] (an empty range: zeros);
// fd is the mean's width when stddevs. One thread per output element; pre: the prefix sums
// or null, as the host chooses.
extern "C" __global__ void k_pool_row_range_stats(float* x, int sx, const float* y, int sy,
                                                  const double* pre, const int* rg, int rows,
                                                  int cols, int nl, int fd, int stddevs,
                                                  float var_floor) {
  int ycols = cols - nl + 1;
  FOR_RC {
    int s = rg[2 * r], e = rg[2 * r + 1];
    float out = 0.0f;
    if (s != e) {
      float count = range_sum(y, sy, pre, ycols, s, e, 0);
      if (c < nl) {
        out = logf(count);
      } else {
        int k = c - nl;
        float inv = 1.0f / count;
        out = __fmul_rn(range_sum(y, sy, pre, ycols, s, e, 1 + k), inv);
        if (stddevs && k >= fd && k < 2 * fd) {
          float m = __fmul_rn(range_sum(y, sy, pre, ycols, s, e, 1 + k - fd), inv);
          float centered = __fsub_rn(out, __fmul_rn(m, m));
          out = sqrtf(fmaxf(centered, var_floor));
        }
      }
    }
    x[(i64)r * sx + c] = out;
  }
}

// StatisticsPooling backward, first step: dd row r (cols = the statistics' width) = the
// derivative with respect to output row r's summed statistics, divided by its count (from
// the log count in ov when nl > 0, else summed from iv's count column over the range).
extern "C" __global__ void k_pool_stats_deriv(float* dd, int sdd, const float* iv, int si,
                                              const float* ov, int sov, const float* od, int sod,
                                              const int* rg, int rows, int cols, int nl, int fd,
                                              int stddevs) {
  FOR_RC {
    const float* d = od + (i64)r * sod + nl;
    const float* y = ov + (i64)r * sov + nl;
    float v = d[c];
    if (stddevs && c < fd) {
      // var = E[x²] − mean², so the mean also gets −2·mean·dvar.
      float dvar = 0.5f * d[fd + c] / y[fd + c];
      v = __fadd_rn(v, __fmul_rn(-2.0f * y[c], dvar));
    } else if (stddevs && c < 2 * fd) {
      v = 0.5f * v / y[c];
    }
    float count;
    if (nl > 0) {
      count = expf(ov[(i64)r * sov]);
    } else {
      count = 0.0f;
      for (int i = rg[2 * r]; i < rg[2 * r + 1]; i++) count = __fadd_rn(count, iv[(i64)i * si]);
    }
    dd[(i64)r * sdd + c] = __fmul_rn(v, 1.0f / count);
  }
}

// Second step: x row r, columns 1 .. cols + 1, adds dd's rows for every output whose range
// holds input row r; inv lists them per input row in increasing order (inv[r] .. inv[r + 1]
// index the list at inv + rows + 1), so each thread owns one element and adds in the host's
// order, overlapping ranges included.
extern "C" __global__ void k_add_pool_stats_deriv(float* x, int sx, const float* dd, int sdd,
                                                  const int* inv, int rows, int cols) {
  const int* list = inv + rows + 1;
  FOR_RC {
    float a = x[(i64)r * sx + 1 + c];
    for (int q = inv[r]; q < inv[r + 1]; q++) a = __fadd_rn(a, dd[(i64)list[q] * sdd + c]);
    x[(i64)r * sx + 1 + c] = a;
  }
}
