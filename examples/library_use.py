"""Library use: build a spec as a Python dict, run it in-process, get the records back.

    python examples/library_use.py
"""

import param_compute

spec = {
    "torch.nn.functional.layer_norm": {
        "input_data_generator": "PyTorch:DefaultDataGenerator",
        "config": [{
            "input": [
                {"args": [{"type": "tensor", "dtype": "float", "shape": [64, size]},
                          {"type": "genericlist", "value": [{"type": "int", "value": size}]}]}
                for size in (256, 512, 1024)
            ],
        }],
    },
    "torch.softmax": {
        "input_iterator": "RangeConfigIterator",
        "input_data_generator": "PyTorch:DefaultDataGenerator",
        "config": [{
            "input": [{
                "args": [{"type": "tensor", "dtype": "float", "shape": [64, [256, 1024, 256]],
                          "__range__": ["shape"]}],
                "kwargs": {"dim": {"type": "int", "value": -1}},
            }],
        }],
    },
}

result = param_compute.run(spec, warmup=2, iteration=20)
for record in result.records:
    stats = record["stats"]["forward"]
    shape = record["config"]["input"]["args"][0]["shape"]
    print(f"{record['op_name']:32} {record['id']:8} shape={shape}: "
          f"median {stats['median'] * 1000:7.1f} µs  (p10 {stats['p10'] * 1000:.1f}, "
          f"p90 {stats['p90'] * 1000:.1f}, n={stats['n']})")
print(f"{result.summary.ok} measured, {len(result.summary.failed)} failed")
