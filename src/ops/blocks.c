/* blocks.c — layers that PyTorch has as one module and headroom builds from
 * other layers through the public builders (a model file's line that expands
 * into several layers): TransformerEncoderLayer. They own no op and no
 * kernel; their parameters carry PyTorch's names. */
#include "ops/ops.h"

#include <stdio.h>
#include <string.h>

int hr_transformer_encoder_layer(hr_model_t *m, const char *name, int x, int64_t d_model, int64_t nhead, int64_t dim_ff,
                                 float dropout, bool gelu, float eps, bool norm_first, bool bias) {
    if (!hr_model_check_tensor(m, x, "TransformerEncoderLayer")) return -1;
    if (!(dropout >= 0.0f && dropout < 1.0f))
        return hr_model_fail(m, HR_ERR_INVALID_ARG, "TransformerEncoderLayer(dropout=%g): give a number in [0, 1)",
                             dropout);
    char base[200], nm[260], sb[64];
    if (name && strlen(name) >= sizeof base) /* its layers' names would be cut, and could collide */
        return hr_model_fail(m, HR_ERR_INVALID_ARG, "TransformerEncoderLayer: the name '%.40s...' has %zu characters; "
                             "give it fewer than %zu", name, strlen(name), sizeof base);
    if (name)
        snprintf(base, sizeof base, "%s", name);
    else
        snprintf(base, sizeof base, "%d", m->g.nl); /* an unnamed layer's number, as hr_model_begin_layer gives */
    const hr_tensor *xt = &m->g.t[x];
    if (xt->shape.ndim != 2 || xt->shape.d[1] != d_model)
        return hr_model_fail(m, HR_ERR_SHAPE, "TransformerEncoderLayer(%lld, ...) takes (batch, time, %lld), but its "
                             "input has per-sample shape %s", (long long)d_model, (long long)d_model,
                             hr_shape_str(&xt->shape, sb, sizeof sb));
#define SUB(suffix) (snprintf(nm, sizeof nm, "%s.%s", base, suffix), nm)
#define OK(t) if ((t) < 0) return -1 /* the first layer that fails says why */
    int64_t C = d_model, shape[1] = {C};
    /* x + dropout1(self_attn(h)): in_proj (q|k|v, MultiheadAttention's one
     * weight), attention (dropping probabilities), out_proj */
    int h = x, r, y;
    if (norm_first) OK(h = hr_layernorm(m, SUB("norm1"), x, 1, shape, eps, true, bias));
    OK(h = hr_linear_named(m, SUB("self_attn"), h, C, 3 * C, bias, "in_proj_weight", "in_proj_bias"));
    OK(h = hr_causal_attention_pdrop(m, SUB("self_attn.sdpa"), h, nhead, dropout));
    OK(h = hr_linear(m, SUB("self_attn.out_proj"), h, C, C, bias));
    if (dropout > 0) OK(h = hr_dropout(m, SUB("dropout1"), h, dropout));
    OK(r = hr_add(m, SUB("residual1"), x, h));
    if (!norm_first) OK(r = hr_layernorm(m, SUB("norm1"), r, 1, shape, eps, true, bias));
    /* x + dropout2(linear2(dropout(activation(linear1(h))))) */
    h = r;
    if (norm_first) OK(h = hr_layernorm(m, SUB("norm2"), r, 1, shape, eps, true, bias));
    OK(h = hr_linear(m, SUB("linear1"), h, C, dim_ff, bias));
    OK(h = gelu ? hr_gelu(m, SUB("activation"), h, false) : hr_relu(m, SUB("activation"), h));
    if (dropout > 0) OK(h = hr_dropout(m, SUB("dropout"), h, dropout));
    OK(h = hr_linear(m, SUB("linear2"), h, dim_ff, C, bias));
    if (dropout > 0) OK(h = hr_dropout(m, SUB("dropout2"), h, dropout));
    OK(y = hr_add(m, SUB("residual2"), r, h));
    if (!norm_first) OK(y = hr_layernorm(m, SUB("norm2"), y, 1, shape, eps, true, bias));
#undef OK
#undef SUB
    return y;
}

/* TransformerEncoderLayer(d_model, nhead, dim_feedforward=2048, dropout=0.1,
 * activation='relu', layer_norm_eps=1e-5, batch_first=False,
 * norm_first=False, bias=True): PyTorch's defaults; headroom's sequences are
 * (batch, time, channels) and its attention causal, so batch_first=True must
 * be written. */
static int build_encoder(hr_model_t *m, const char *name, const hr_layer_call *c) {
    const hr_arg *a = c->a;
    if (!(a[3].f >= 0 && a[3].f < 1))
        return hr_model_fail(m, HR_ERR_PARSE, "TransformerEncoderLayer(dropout=%.*s): give a number in [0, 1)",
                             a[3].len, a[3].src);
    bool gelu = hr_arg_is(&a[4], "gelu");
    if (!gelu && !hr_arg_is(&a[4], "relu"))
        return hr_model_fail(m, HR_ERR_PARSE, "TransformerEncoderLayer(activation=%.*s): write 'relu' or 'gelu'",
                             a[4].len, a[4].src);
    if (!a[6].i)
        return hr_model_fail(m, HR_ERR_UNSUPPORTED, "TransformerEncoderLayer: headroom's sequences are (batch, time, "
                             "channels); write batch_first=True");
    if (!(a[5].f > 0))
        return hr_model_fail(m, HR_ERR_PARSE, "TransformerEncoderLayer(layer_norm_eps=%.*s): give a number > 0",
                             a[5].len, a[5].src);
    return hr_transformer_encoder_layer(m, name, c->x[0], a[0].i, a[1].i, a[2].i, (float)a[3].f, gelu, (float)a[5].f,
                                        a[7].i, a[8].i);
}

const hr_layer_sig hr_block_layers[] = {
    {"TransformerEncoderLayer",
     {HR_REQ("d_model", HR_ARG_SIZE), HR_REQ("nhead", HR_ARG_SIZE), HR_OPT("dim_feedforward", HR_ARG_SIZE, "2048"),
      HR_OPT("dropout", HR_ARG_FLOAT, "0.1"), HR_OPT("activation", HR_ARG_STR, "'relu'"),
      HR_OPT("layer_norm_eps", HR_ARG_FLOAT, "1e-05"), HR_OPT("batch_first", HR_ARG_BOOL, "False"),
      HR_OPT("norm_first", HR_ARG_BOOL, "False"), HR_OPT("bias", HR_ARG_BOOL, "True")},
     HR_LAYER_ONE, build_encoder},
    {0},
};
