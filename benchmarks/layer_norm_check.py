"""Check a built dropout_layer_norm wheel against torch's float32 layer_norm / rms_norm on the GPU.

    python benchmarks/layer_norm_check.py WHEEL
"""
import json
import sys
import zipfile

wheel = sys.argv[1]
target = wheel + ".d"
zipfile.ZipFile(wheel).extractall(target)
sys.path.insert(0, target)
import torch  # noqa: E402
import dropout_layer_norm  # noqa: E402

torch.manual_seed(0)
res = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}
rows, hidden = 4096, 4096
for dtype in (torch.float32, torch.bfloat16, torch.float16):
    x = torch.randn(rows, hidden, device="cuda", dtype=dtype)
    gamma = torch.randn(hidden, device="cuda", dtype=dtype)
    beta = torch.randn(hidden, device="cuda", dtype=dtype)
    for rms in (False, True):
        z, *_ = dropout_layer_norm.dropout_add_ln_fwd(x, None, gamma, None if rms else beta, None, None, None, None,
                                                       0.0, 1e-5, 1.0, 0, None, False, rms)
        xf = x.float()
        if rms:
            want = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5) * gamma.float()
        else:
            want = torch.nn.functional.layer_norm(xf, (hidden,), gamma.float(), beta.float(), 1e-5)
        res[f"max_abs_err_{'rms' if rms else 'ln'}_{str(dtype).split('.')[-1]}"] = float((z.float() - want).abs().max())
res["ok"] = res["max_abs_err_ln_float32"] < 1e-3 and res["max_abs_err_rms_float32"] < 1e-3
print(json.dumps(res))
sys.exit(0 if res["ok"] else 1)
