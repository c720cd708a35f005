/* test_modelfile.c — model files: every example parses to the right output
 * shape and parameter names, the broken DeepCNN fails as it should, and each
 * kind of bad input gives its status and a message with file:line. */
#include "check.h"
#include "io/io.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The status behind hr_last_error() (core keeps it; only hr_error_prefix
 * returns it, so the message is put back afterwards). */
static hr_status last_status(void) {
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", hr_last_error());
    hr_status st = hr_error_prefix("-");
    hr_error_set(st, "%s", msg);
    return st;
}

static void check_output(const char *path, int ndim, const int64_t *dims) {
    hr_model_t *m = hr_modelfile_load(path);
    CHECK(m != NULL, "%s: %s", path, hr_last_error());
    if (!m) return;
    int o = hr_model_output(m);
    CHECK(hr_tensor_ndim(m, o) == ndim, "%s: output has %d dims, expected %d", path, hr_tensor_ndim(m, o), ndim);
    for (int i = 0; i < ndim; i++)
        CHECK(hr_tensor_dim(m, o, i) == dims[i], "%s: output dim %d is %lld, expected %lld", path, i,
              (long long)hr_tensor_dim(m, o, i), (long long)dims[i]);
    hr_model_free(m);
}

static void check_output_text(const char *path, const char *text, int ndim, const int64_t *dims) {
    hr_model_t *m = hr_modelfile_parse(text, path);
    CHECK(m != NULL, "%s: %s", path, hr_last_error());
    if (!m) return;
    int o = hr_model_output(m);
    bool ok = hr_tensor_ndim(m, o) == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = hr_tensor_dim(m, o, i) == dims[i];
    CHECK(ok, "%s: output shape", path);
    hr_model_free(m);
}

/* Compiles a model and checks that a parameter has the given shape. */
static void check_param(const char *path, const char *text, const char *param, int ndim, const int64_t *dims) {
    hr_model_t *m = text ? hr_modelfile_parse(text, path) : hr_modelfile_load(path);
    CHECK(m != NULL, "%s: %s", path, hr_last_error());
    if (!m) return;
    hr_config_t cfg = hr_config_default();
    cfg.batch = 2;
    hr_session_t *s = hr_compile(m, &cfg);
    CHECK(s != NULL, "%s compiles: %s", path, hr_last_error());
    int i = s ? hr_state_find(s, param) : -1;
    CHECK(i >= 0, "%s has parameter %s", path, param);
    if (i >= 0) {
        bool ok = hr_state_ndim(s, i) == ndim;
        for (int d = 0; ok && d < ndim; d++) ok = hr_state_dim(s, i, d) == dims[d];
        CHECK(ok, "%s: %s has the wrong shape", path, param);
    }
    hr_session_free(s);
    hr_model_free(m);
}

static void test_examples(void) {
    const int64_t ten[1] = {10};
    check_output("examples/mlp.model", 1, ten);
    check_output("examples/simple_cnn.model", 1, ten);
    check_output("examples/deep_cnn.model", 1, ten);
    check_output("examples/fashion.model", 1, ten);
    check_output("examples/resnet_tiny.model", 1, ten);
    check_output("examples/resnet20.model", 1, ten);
    check_output("bench/models/mobilenet_v1.model", 1, ten);
    /* Names as nn.Sequential gives them: every layer line counts. */
    check_param("examples/fashion.model", NULL, "0.weight", 4, (int64_t[]){32, 1, 3, 3});
    check_param("examples/fashion.model", NULL, "5.running_var", 1, (int64_t[]){64});
    check_param("examples/fashion.model", NULL, "10.weight", 2, (int64_t[]){256, 3136});
    check_param("examples/fashion.model", NULL, "13.bias", 1, (int64_t[]){10});
    check_param("examples/mlp.model", NULL, "4.weight", 2, (int64_t[]){10, 1000});
    check_param("examples/deep_cnn.model", NULL, "10.weight", 2, (int64_t[]){10, 8192});
    check_param("examples/resnet_tiny.model", NULL, "right.weight", 4, (int64_t[]){16, 16, 3, 3});
    check_param("examples/resnet_tiny.model", NULL, "left.weight", 4, (int64_t[]){16, 16, 1, 1});
    check_param("examples/resnet_tiny.model", NULL, "17.weight", 2, (int64_t[]){10, 32});
    check_param("examples/resnet20.model", NULL, "l2_0_sc.weight", 4, (int64_t[]){32, 16, 1, 1});
    check_param("examples/resnet20.model", NULL, "l3_2_conv2.weight", 4, (int64_t[]){64, 64, 3, 3});
    check_param("bench/models/mobilenet_v1.model", NULL, "3.weight", 4, (int64_t[]){32, 1, 3, 3}); /* depthwise */
    /* grouped, depthwise and dilated convolutions: the weight is (K, C/groups, k, k) */
    const char *gd = "input 4 9 9\ng = Conv2d(4, 6, 3, groups=2)\ndw = Conv2d(6, 6, 3, padding=1, groups=6, bias=False)\n"
                     "dm = Conv2d(6, 12, 3, stride=2, padding=2, dilation=2, groups=6)\n"
                     "same = Conv2d(12, 4, 3, padding='same', dilation=2)\nFlatten()\nloss MSELoss";
    check_param("gd.model", gd, "g.weight", 4, (int64_t[]){6, 2, 3, 3});
    check_param("gd.model", gd, "dw.weight", 4, (int64_t[]){6, 1, 3, 3});
    check_param("gd.model", gd, "dm.weight", 4, (int64_t[]){12, 1, 3, 3});
    check_param("gd.model", gd, "dm.bias", 1, (int64_t[]){12});
    check_param("gd.model", gd, "same.weight", 4, (int64_t[]){4, 12, 3, 3});
    /* 9 -> 7 (k3) -> 7 (k3 p1) -> 4 ((7 + 4 - 5) / 2 + 1) -> 4 (same): 4 x 4 x 4 */
    check_output_text("gd.model", gd, 1, (int64_t[]){64});

    hr_model_t *m = hr_modelfile_load("examples/deep_cnn_broken.model");
    const char *msg = hr_last_error();
    CHECK(m == NULL, "the broken DeepCNN must not build");
    CHECK(last_status() == HR_ERR_SHAPE, "broken DeepCNN: status %s", hr_status_name(last_status()));
    CHECK(strstr(msg, "examples/deep_cnn_broken.model:20:") && strstr(msg, "2048") && strstr(msg, "8192") &&
              strstr(msg, "Linear") && strstr(msg, "layer 10"),
          "broken DeepCNN message names the layer and both sizes: %s", msg);
    hr_model_free(m);
}

/* Syntax a PyTorch user may write, all accepted. */
static void test_syntax(void) {
    static const struct { const char *text; int ndim; int64_t d0; } ok[] = {
        {"input 4\r\nLinear(4, 3)\r\nloss MSELoss\r\n", 1, 3},
        {"  # comment\n\ninput 4   # features\nnn.Linear(4, 3, bias=False),\nnn.ReLU(inplace=True),\n"
         "loss CrossEntropyLoss()", 1, 3},
        {"input 1 8 8\nConv2d(1, 4, kernel_size=(3, 3), stride=1, padding='same', bias=true)\nReLU\n"
         "MaxPool2d(2, stride=None)\nAvgPool2d(kernel_size=2, stride=2)\nFlatten()\nLinear(16, 5)\n"
         "LogSoftmax(dim=1)\nloss MSELoss", 1, 5},
        {"input 12\nBatchNorm1d(12, eps=1e-3, momentum=0.01)\nDropout(p=0.1)\nReshape(3, -1, 2)\nFlatten()\n"
         "Softmax(dim=-1)\nloss MSELoss(reduction='mean')", 1, 12},
        {"input 2 4 4\na = Conv2d(2, 2, 1)\nb = Conv2d(2, 3, 1)(input)\nc = Concat(a, b, input)\n"
         "Conv2d(7, 2, 1)\nAdd(a)\nAdd(0, 4)\nAdaptiveAvgPool2d((1, 1))\nFlatten()\nloss CrossEntropyLoss", 1, 2},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        hr_model_t *m = hr_modelfile_parse(ok[i].text, "ok.model");
        CHECK(m != NULL, "good model %zu: %s", i, hr_last_error());
        if (!m) continue;
        int o = hr_model_output(m);
        CHECK(hr_tensor_ndim(m, o) == ok[i].ndim && hr_tensor_dim(m, o, 0) == ok[i].d0, "good model %zu output", i);
        hr_model_free(m);
    }
}

typedef struct {
    const char *text;
    hr_status st;
    int line;
    const char *needle;
} bad_case;

#define HEAD "input 4\n"
#define IMG "input 1 8 8\n"
static const bad_case bad[] = {
    {HEAD "Conv3d(1, 2, 3)\nloss MSELoss", HR_ERR_PARSE, 2, "unknown layer 'Conv3d'; known layers: Linear, Conv2d"},
    {HEAD "relu()\nloss MSELoss", HR_ERR_PARSE, 2, "unknown layer 'relu' (did you mean ReLU?)"},
    {HEAD "Linear(4, 2, foo=1)\nloss MSELoss", HR_ERR_PARSE, 2,
     "Linear has no argument 'foo'; its arguments are: in_features, out_features, bias"},
    {HEAD "ReLU(x=1)\nloss MSELoss", HR_ERR_PARSE, 2, "ReLU has no argument 'x'"},
    {HEAD "Linear(4)\nloss MSELoss", HR_ERR_PARSE, 2, "Linear is missing its argument 'out_features'"},
    {HEAD "Linear\nloss MSELoss", HR_ERR_PARSE, 2, "Linear is missing its argument 'in_features'"},
    {HEAD "ReLU(True, 5)\nloss MSELoss", HR_ERR_PARSE, 2, "ReLU takes at most 1 positional argument but 2 were given"},
    {HEAD "Flatten(0)\nloss MSELoss", HR_ERR_UNSUPPORTED, 2, "Flatten with start_dim=0 is not supported"},
    {HEAD "Linear(4, 2.5)\nloss MSELoss", HR_ERR_PARSE, 2, "out_features must be a positive integer, got 2.5"},
    {HEAD "Linear(4, x)\nloss MSELoss", HR_ERR_PARSE, 2, "out_features must be a positive integer, got x"},
    {HEAD "Linear(4, 0)\nloss MSELoss", HR_ERR_PARSE, 2, "out_features must be a positive integer, got 0"},
    {IMG "Conv2d(1, 2, -3)\nloss MSELoss", HR_ERR_PARSE, 2, "kernel_size must be a positive integer, got -3"},
    {HEAD "Linear(4, 2x)\nloss MSELoss", HR_ERR_PARSE, 2, "'2x' is not a number"},
    {HEAD "Linear(4, 99999999999999999999)\nloss MSELoss", HR_ERR_PARSE, 2, "too large"},
    {HEAD "Linear(4, 2, bias=1)\nloss MSELoss", HR_ERR_PARSE, 2, "bias must be True or False, got 1"},
    {HEAD "Linear(4, 2, bias=True, bias=False)\nloss MSELoss", HR_ERR_PARSE, 2, "'bias' given twice"},
    {HEAD "Linear(4, 2, in_features=4)\nloss MSELoss", HR_ERR_PARSE, 2, "two values for argument 'in_features'"},
    {HEAD "Linear(in_features=4, 2)\nloss MSELoss", HR_ERR_PARSE, 2, "positional argument follows a keyword"},
    {HEAD "Linear(4, 2\nloss MSELoss", HR_ERR_PARSE, 2, "expected ',' or ')'"},
    {HEAD "Linear(4, 2) extra\nloss MSELoss", HR_ERR_PARSE, 2, "unexpected 'extra' after the layer"},
    {HEAD "Linear(4, 2);\nloss MSELoss", HR_ERR_PARSE, 2, "unexpected ';' after the layer"},
    {HEAD "\n# c\nLinear(4, 2),,\nloss MSELoss", HR_ERR_PARSE, 4, "unexpected ','"},
    {"# no input\nLinear(4, 2)\nloss MSELoss", HR_ERR_PARSE, 2, "Linear comes before the input line"},
    {"# only a comment\n\n", HR_ERR_PARSE, 2, "no input line"},
    {"", HR_ERR_PARSE, 1, "no input line"},
    {HEAD "Linear(4, 2)\n\n", HR_ERR_PARSE, 3, "no loss line; end it with `loss CrossEntropyLoss`"},
    {HEAD "Linear(4, 2)\nloss MSELoss\nReLU()", HR_ERR_PARSE, 4, "nothing may follow the loss line (line 3)"},
    {HEAD "loss MSELoss\nloss MSELoss", HR_ERR_PARSE, 3, "nothing may follow the loss line"},
    {HEAD "loss NLLLoss", HR_ERR_PARSE, 2, "unknown loss 'NLLLoss'; known losses: CrossEntropyLoss, MSELoss"},
    {HEAD "loss CrossEntropyLoss(label_smoothing=0.1)", HR_ERR_UNSUPPORTED, 2, "label_smoothing=0.1 is not supported"},
    {HEAD "input 4\nloss MSELoss", HR_ERR_PARSE, 2, "a second input line"},
    {"input 0\nloss MSELoss", HR_ERR_PARSE, 1, "input sizes must be positive integers, got 0"},
    {"input 1 2\nloss MSELoss", HR_ERR_PARSE, 1, "input takes 1 size (features) or 3"},
    {"input 4.5\nloss MSELoss", HR_ERR_PARSE, 1, "positive integers, got 4.5"},
    {"input\nloss MSELoss", HR_ERR_PARSE, 1, "got 0"},
    {HEAD "Add(skp)\nloss MSELoss", HR_ERR_PARSE, 2,
     "Add refers to 'skp', which is not a layer defined above (names so far: input)"},
    {HEAD "a = ReLU()\nAdd(b)\nloss MSELoss", HR_ERR_PARSE, 3, "names so far: input, a, 0"},
    {HEAD "ReLU()(later)\nlater = ReLU()\nloss MSELoss", HR_ERR_PARSE, 2, "ReLU refers to 'later'"},
    {HEAD "Add(input, input, input)\nloss MSELoss", HR_ERR_PARSE, 2, "Add takes one layer name"},
    {HEAD "Add(input)(input)\nloss MSELoss", HR_ERR_PARSE, 2, "Add takes the layers it joins as its arguments"},
    {HEAD "Concat(input)\nloss MSELoss", HR_ERR_PARSE, 2, "Concat takes two or more layer names, got 1"},
    {HEAD "a = ReLU()\na = ReLU()\nloss MSELoss", HR_ERR_PARSE, 3, "layer name 'a' is already used at line 2"},
    {HEAD "input = ReLU()\nloss MSELoss", HR_ERR_PARSE, 2, "'input' cannot name a layer"},
    {HEAD "Linear(5, 2)\nloss MSELoss", HR_ERR_SHAPE, 2, "in_features is 5"},
    {IMG "Linear(64, 2)\nloss MSELoss", HR_ERR_SHAPE, 2, "add Flatten()"},
    {IMG "Conv2d(3, 2, 3)\nloss MSELoss", HR_ERR_SHAPE, 2, "in_channels is 3"},
    /* groups and dilation: nn.Conv2d's rules */
    {IMG "Conv2d(1, 2, 3, groups=2)\nloss MSELoss", HR_ERR_INVALID_ARG, 2, "in_channels (1) must be divisible by groups (2)"},
    {"input 4 8 8\nConv2d(4, 6, 3, groups=4)\nloss MSELoss", HR_ERR_INVALID_ARG, 2,
     "out_channels (6) must be divisible by groups (4)"},
    {"input 4 8 8\nConv2d(4, 8, 3, groups=8)\nloss MSELoss", HR_ERR_INVALID_ARG, 2,
     "in_channels (4) must be divisible by groups (8)"},
    {IMG "Conv2d(1, 2, 3, groups=0)\nloss MSELoss", HR_ERR_PARSE, 2, "groups must be a positive integer, got 0"},
    {IMG "Conv2d(1, 2, 3, dilation=0)\nloss MSELoss", HR_ERR_PARSE, 2, "dilation must be a positive integer, got 0"},
    {IMG "Conv2d(1, 2, 3, dilation=-2)\nloss MSELoss", HR_ERR_PARSE, 2, "dilation must be a positive integer, got -2"},
    {IMG "Conv2d(1, 2, 3, groups=1.5)\nloss MSELoss", HR_ERR_PARSE, 2, "groups must be a positive integer, got 1.5"},
    {IMG "Conv2d(1, 2, 3, dilation=(2, 1))\nloss MSELoss", HR_ERR_UNSUPPORTED, 2, "dilation=(2, 1): headroom supports only"},
    {IMG "Conv2d(1, 2, 3, dilation=4)\nloss MSELoss", HR_ERR_SHAPE, 2,
     "kernel_size 3 with dilation 4 reaches over 9 pixels, more than the padded input 8x8"},
    {IMG "Conv2d(1, 2, 2, dilation=3, padding='same')\nloss MSELoss", HR_ERR_UNSUPPORTED, 2,
     "padding='same' needs stride 1 and an even dilation * (kernel_size - 1)"},
    {IMG "Conv2d(1, 2, 3, dilation=2000000)\nloss MSELoss", HR_ERR_PARSE, 2, "dilation or groups is too large"},
    {IMG "Conv2d(1, 2, 3, dilation=2000000, padding='same')\nloss MSELoss", HR_ERR_PARSE, 2,
     "kernel_size or dilation is too large"},
    {IMG "Conv2d(1, 2, 3, padding_mode='reflect')\nloss MSELoss", HR_ERR_UNSUPPORTED, 2,
     "padding_mode='reflect' is not supported by headroom"},
    {IMG "Conv2d(1, 2, (3, 5))\nloss MSELoss", HR_ERR_UNSUPPORTED, 2, "only square kernels"},
    {IMG "Conv2d(1, 2, 4, padding='same')\nloss MSELoss", HR_ERR_UNSUPPORTED, 2, "odd kernel_size"},
    {IMG "Conv2d(1, 2, 3, padding='full')\nloss MSELoss", HR_ERR_PARSE, 2, "'same' or 'valid'"},
    {IMG "MaxPool2d(2, padding=1)\nloss MSELoss", HR_ERR_UNSUPPORTED, 2, "padding=1 is not supported"},
    {IMG "AdaptiveAvgPool2d(2)\nloss MSELoss", HR_ERR_UNSUPPORTED, 2, "only output size 1"},
    {HEAD "Softmax(dim=0)\nloss MSELoss", HR_ERR_UNSUPPORTED, 2, "only dim=1"},
    {HEAD "BatchNorm2d(4)\nloss MSELoss", HR_ERR_SHAPE, 2, "use BatchNorm1d"},
    {HEAD "BatchNorm1d(4, affine=False)\nloss MSELoss", HR_ERR_UNSUPPORTED, 2, "affine=False is not supported"},
    {HEAD "Dropout(1.5)\nloss MSELoss", HR_ERR_PARSE, 2, "Dropout p must be in [0, 1)"},
    {HEAD "Reshape(3, 3)\nloss MSELoss", HR_ERR_SHAPE, 2, "cannot reshape"},
    {HEAD "Reshape(-1, -1)\nloss MSELoss", HR_ERR_PARSE, 2, "one may be -1"},
    {HEAD "Reshape(3, -1)\nloss MSELoss", HR_ERR_SHAPE, 2, "do not divide"},
    {IMG "loss CrossEntropyLoss", HR_ERR_SHAPE, 2, "CrossEntropyLoss takes (batch, classes)"},
    {HEAD "Linear(4, 2, bias='yes)\nloss MSELoss", HR_ERR_PARSE, 2, "unterminated string"},
    {HEAD "\xc3\xa9\nloss MSELoss", HR_ERR_PARSE, 2, "expected a layer"},
    {HEAD "= ReLU()\nloss MSELoss", HR_ERR_PARSE, 2, "expected a layer"},
    /* sequences: token ids, attention, tied weights, initial values */
    {HEAD "init xavier\nloss MSELoss", HR_ERR_PARSE, 2, "init takes gpt2 (GPT-2's initial values) or pytorch"},
    {HEAD "init\nloss MSELoss", HR_ERR_PARSE, 2, "init takes gpt2"},
    {HEAD "a. = ReLU()\nloss MSELoss", HR_ERR_PARSE, 2, "unknown layer 'a'"},
    {IMG "Embedding(10, 4)\nloss MSELoss", HR_ERR_SHAPE, 2, "Embedding takes (batch, time) token ids"},
    {IMG "Conv2d(1, 1, 1)\nEmbedding(10, 4)\nloss MSELoss", HR_ERR_SHAPE, 3, "cannot follow another layer"},
    {"input 8\nEmbedding(10, 4)\nCausalSelfAttention(4, 2)\nloss MSELoss", HR_ERR_SHAPE, 3,
     "takes the 3 x 4 = 12 channels of q, k and v, but its input has 4"},
    {"input 8\nEmbedding(10, 6)\nCausalSelfAttention(2, 4)\nloss MSELoss", HR_ERR_INVALID_ARG, 3,
     "num_heads is 4; it must divide the 2 channels"},
    {"input 8\nEmbedding(10, 4)\nTransformerEncoderLayer(4, 2, dropout=1.0, batch_first=True)\nloss MSELoss",
     HR_ERR_PARSE, 3, "TransformerEncoderLayer(dropout=1.0): give a number in [0, 1)"},
    {"input 8\nEmbedding(10, 4)\nLinear(4, 12)\nCausalSelfAttention(4, 2, attn_pdrop=-0.1)\nloss MSELoss",
     HR_ERR_PARSE, 4, "CausalSelfAttention attn_pdrop must be in [0, 1), got -0.1"},
    {"input 8\nEmbedding(10, 4)\nTransformerEncoderLayer(4, 2, dropout=0.0)\nloss MSELoss", HR_ERR_UNSUPPORTED, 3,
     "write batch_first=True"},
    {"input 8\nEmbedding(10, 4)\nTransformerEncoderLayer(4, 2, 8, 0.0, 'tanh', batch_first=True)\nloss MSELoss",
     HR_ERR_PARSE, 3, "activation='tanh'): write 'relu' or 'gelu'"},
    {"input 8\nEmbedding(10, 4)\nTransformerEncoderLayer(6, 2, dropout=0.0, batch_first=True)\nloss MSELoss",
     HR_ERR_SHAPE, 3, "TransformerEncoderLayer(6, ...) takes (batch, time, 6), but its input has per-sample shape [8, 4]"},
    {"input 8\nEmbedding(10, 6)\nTransformerEncoderLayer(6, 4, dropout=0.0, batch_first=True)\nloss MSELoss",
     HR_ERR_INVALID_ARG, 3, "num_heads is 4; it must divide the 6 channels"},
    {"input 8\nEmbedding(10, 4)\nPositionEmbedding(6, 4)\nloss MSELoss", HR_ERR_SHAPE, 3,
     "the sequence has 8 positions but the table only 6"},
    {"input 8\nwte = Embedding(10, 4)\nLinear(4, 10, tied_to='wpe')\nloss CrossEntropyLoss", HR_ERR_SHAPE, 3,
     "tied_to='wpe': no layer before this one has that name"},
    {"input 8\nwte = Embedding(10, 4)\nLinear(4, 12, tied_to='wte')\nloss CrossEntropyLoss", HR_ERR_SHAPE, 3,
     "its weight is [10, 4], but this layer's must be (12, 4)"},
    {"input 8\nwte = Embedding(10, 4)\nLinear(4, 10, tied_to=wte)\nloss CrossEntropyLoss", HR_ERR_PARSE, 3,
     "tied_to must be a string"},
    {"input 8\nEmbedding(10, 4, padding_idx=1)\nloss MSELoss", HR_ERR_UNSUPPORTED, 2, "padding_idx"},
};

static void test_bad(void) {
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hr_error_clear();
        hr_model_t *m = hr_modelfile_parse(bad[i].text, "bad.model");
        char where[32];
        snprintf(where, sizeof where, "bad.model:%d:", bad[i].line);
        const char *msg = hr_last_error();
        CHECK(m == NULL, "bad case %zu was accepted", i);
        CHECK(last_status() == bad[i].st, "bad case %zu: status %s, expected %s (%s)", i, hr_status_name(last_status()),
              hr_status_name(bad[i].st), msg);
        CHECK(strstr(msg, where) != NULL, "bad case %zu: no '%s' in: %s", i, where, msg);
        CHECK(strstr(msg, bad[i].needle) != NULL, "bad case %zu: no '%s' in: %s", i, bad[i].needle, msg);
        hr_model_free(m);
    }
}

static void test_files(void) {
    hr_model_t *m = hr_modelfile_load("/nonexistent/x.model");
    CHECK(!m && last_status() == HR_ERR_IO && strstr(hr_last_error(), "/nonexistent/x.model"),
          "missing file: %s", hr_last_error());
    char path[] = "/tmp/hr_test_modelfile.XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) {
        const char text[] = "input 4\0\nloss MSELoss\n";
        CHECK(write(fd, text, sizeof text - 1) == (ssize_t)(sizeof text - 1), "write");
        close(fd);
        m = hr_modelfile_load(path);
        CHECK(!m && last_status() == HR_ERR_PARSE && strstr(hr_last_error(), "byte 7 is a NUL"), "NUL: %s",
              hr_last_error());
        unlink(path);
    }
    /* The model takes its name from the file. */
    m = hr_modelfile_load("examples/mlp.model");
    CHECK(m != NULL, "mlp loads");
    hr_model_free(m);
}

/* hr_conv2d_ex's own checks (the model files' parser catches non-positive
 * values before it): status, layer and numbers in the message. */
static void test_conv_api(void) {
    static const struct { int k, stride, pad, dil, groups; int64_t cin, cout; hr_status st; const char *needle; } c[] = {
        {3, 1, 1, 0, 1, 4, 8, HR_ERR_INVALID_ARG, "dilation and groups must be positive (got dilation=0 groups=1)"},
        {3, 1, 1, 1, -2, 4, 8, HR_ERR_INVALID_ARG, "(got dilation=1 groups=-2)"},
        {3, 1, 1, 1, 3, 4, 6, HR_ERR_INVALID_ARG, "in_channels (4) must be divisible by groups (3)"},
        {3, 1, 1, 1, 4, 4, 6, HR_ERR_INVALID_ARG, "out_channels (6) must be divisible by groups (4)"},
        {3, 1, 0, 3, 1, 4, 8, HR_ERR_SHAPE, "kernel_size 3 with dilation 3 reaches over 7 pixels"},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        hr_model_t *m = hr_model_new("conv_api");
        int x = hr_input(m, "x", 3, (int64_t[]){4, 6, 6});
        int y = hr_conv2d_ex(m, "dwc", x, c[i].cin, c[i].cout, c[i].k, c[i].stride, c[i].pad, c[i].dil, c[i].groups, true);
        const char *msg = hr_last_error();
        CHECK(y < 0 && last_status() == c[i].st && strstr(msg, c[i].needle) && strstr(msg, "dwc"),
              "conv api case %zu: %d, %s: %s", i, y, hr_status_name(last_status()), msg);
        hr_model_free(m);
    }
    hr_model_t *m = hr_model_new("conv_api");
    int x = hr_input(m, "x", 3, (int64_t[]){4, 6, 6});
    int y = hr_conv2d_ex(m, NULL, x, 4, 8, 3, 2, 2, 2, 4, false); /* (6 + 4 - 5) / 2 + 1 = 3 */
    CHECK(y >= 0 && hr_tensor_dim(m, y, 0) == 8 && hr_tensor_dim(m, y, 1) == 3 && hr_tensor_dim(m, y, 2) == 3,
          "hr_conv2d_ex output: %s", hr_last_error());
    hr_model_free(m);
}

/* Every allocation fails in turn: NULL with HR_ERR_OOM, nothing leaked (valgrind). */
static void test_faults(void) {
    FILE *f = fopen("examples/resnet_tiny.model", "rb");
    if (!f) { CHECK(0, "examples/resnet_tiny.model not found (run from the repository root)"); return; }
    static char text[8192];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = 0;
    fclose(f);
    hr_fault_fail_at(0);
    hr_model_free(hr_modelfile_parse(text, "resnet_tiny.model"));
    int64_t total = hr_fault_fail_at(0), failed = 0;
    for (int64_t k = 1; k <= total; k++) {
        hr_fault_fail_at(k);
        hr_model_t *m = hr_modelfile_parse(text, "resnet_tiny.model");
        hr_fault_fail_at(0);
        /* An allocation the library can do without may fail silently. */
        if (m) { hr_model_free(m); continue; }
        failed++;
        CHECK(last_status() == HR_ERR_OOM, "alloc %lld of %lld: %s", (long long)k, (long long)total, hr_last_error());
    }
    CHECK(total > 20 && failed > total / 2, "%lld of %lld failed allocations failed the parse", (long long)failed,
          (long long)total);
}

/* Dotted names (PyTorch's module paths) name parameters and are referenced;
 * `init gpt2` and a tied weight parse; a next-token model's output is (time, vocabulary). */
static void test_sequences(void) {
    const char *gpt = "input 8\ninit gpt2\ntransformer.wte = Embedding(10, 4)\nx0 = PositionEmbedding(8, 4)\n"
                      "transformer.h.0.attn.c_attn = Linear(4, 12)\nCausalSelfAttention(4, 2)\n"
                      "transformer.h.0.attn.c_proj = Linear(4, 4)\nr = Add(x0)\nAdd(transformer.h.0.attn.c_proj)\n"
                      "lm_head = Linear(4, 10, bias=False, tied_to='transformer.wte')\nloss CrossEntropyLoss\n";
    check_param("gpt.model", gpt, "transformer.h.0.attn.c_attn.weight", 2, (int64_t[]){12, 4});
    check_param("gpt.model", gpt, "transformer.wte.weight", 2, (int64_t[]){10, 4});
    check_output_text("gpt.model", gpt, 2, (int64_t[]){8, 10});
    hr_model_t *m = hr_modelfile_parse(gpt, "gpt.model");
    hr_config_t cfg = hr_config_default();
    cfg.batch = 2;
    hr_session_t *s = m ? hr_compile(m, &cfg) : NULL;
    CHECK(s && hr_state_find(s, "lm_head.weight") < 0, "a tied Linear has no weight of its own");
    hr_session_free(s);
    hr_model_free(m);
    check_output("examples/char_gpt.model", 2, (int64_t[]){256, 256});
    check_output("examples/gpt2.model", 2, (int64_t[]){1024, 50257});
}

/* TransformerEncoderLayer(dropout=0.1) drops where PyTorch's module does
 * (attention probabilities, after out_proj, the activation and linear2):
 * the same parameters as dropout=0.0, another training loss from the same
 * start, and in inference the same output bits. */
static void test_encoder_dropout(void) {
    char text[2][400];
    for (int k = 0; k < 2; k++)
        snprintf(text[k], sizeof text[k], "input 6\nEmbedding(10, 8)\nTransformerEncoderLayer(8, 2, 16, dropout=%s, "
                 "activation='gelu', batch_first=True, norm_first=True)\nLinear(8, 10)\nloss CrossEntropyLoss\n",
                 k ? "0.1" : "0.0");
    float x[3 * 6], out[2][3 * 6 * 10], loss[2] = {0, 0};
    int32_t y[3 * 6];
    for (int i = 0; i < 3 * 6; i++) x[i] = (float)((i * 7) % 10), y[i] = (i * 3) % 10;
    int nstate[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        hr_model_t *m = hr_modelfile_parse(text[k], "encoder.model");
        CHECK(m != NULL, "TransformerEncoderLayer(dropout=%s): %s", k ? "0.1" : "0.0", hr_last_error());
        if (!m) return;
        hr_config_t cfg = hr_config_default();
        cfg.batch = 3, cfg.seed = 5;
        hr_session_t *s = hr_compile(m, &cfg);
        CHECK(s && hr_session_alloc(s) == HR_OK && hr_train_step(s, x, y, &loss[k]) == HR_OK, "train: %s",
              hr_last_error());
        nstate[k] = s ? hr_state_count(s) : -1;
        hr_session_free(s);
        cfg.mode = HR_MODE_INFER;
        s = hr_compile(m, &cfg);
        CHECK(s && hr_session_alloc(s) == HR_OK && hr_forward(s, x, out[k]) == HR_OK, "infer: %s", hr_last_error());
        hr_session_free(s);
        hr_model_free(m);
    }
    CHECK(nstate[0] == nstate[1] && nstate[0] > 0, "dropout changed the state: %d vs %d tensors", nstate[0], nstate[1]);
    CHECK(isfinite(loss[1]) && loss[0] != loss[1], "the training loss with dropout %g, without %g", loss[1], loss[0]);
    CHECK(!memcmp(out[0], out[1], sizeof out[0]), "in inference dropout=0.1 changed the output");
}

int main(void) {
    test_examples();
    test_sequences();
    test_encoder_dropout();
    test_syntax();
    test_bad();
    test_files();
    test_conv_api();
    test_faults();
    TEST_END();
}
