# cudnn_env.sh — sourced by the GPU scripts: cuDNN is loaded at run time, the
# system's libcudnn.so.9, else PyTorch's copy, which this puts on
# LD_LIBRARY_PATH (CUDNN_FROM says where; empty when the system's is used).
CUDNN_FROM=""
if ! ldconfig -p 2>/dev/null | grep -q 'libcudnn\.so\.9 '; then
    CUDNN_FROM=$(${PY:-python3} -c 'import os, nvidia.cudnn as m; print(os.path.join(list(m.__path__)[0], "lib"))' \
        2>/dev/null)
    if [ -n "$CUDNN_FROM" ] && [ -d "$CUDNN_FROM" ]; then
        export LD_LIBRARY_PATH="$CUDNN_FROM${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    else
        CUDNN_FROM=""
    fi
fi
