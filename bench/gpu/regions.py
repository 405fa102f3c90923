"""The reference quick-start model, profiled region by region through nsight_core on a real GPU."""
import torch
import torch.nn as nn

import nsight_core

model = nn.Sequential(nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 4096)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)


def step() -> torch.Tensor:
    loss = model(torch.randn(512, 4096, device="cuda")).pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss


for _ in range(3):
    step()
torch.cuda.synchronize()
with nsight_core.range("training"):
    for i in range(20):
        torch.cuda.nvtx.range_push(f"step_{i}")
        loss = step()
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
with nsight_core.range("evaluation"):
    with torch.no_grad():
        for _ in range(5):
            torch.cuda.nvtx.range_push("eval")
            model(torch.randn(512, 4096, device="cuda"))
            torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
print("loss", loss.item())
