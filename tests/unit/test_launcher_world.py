"""Under a launcher the global batch is shared by every rank (engine/trainers/script/world.py): the launch's
rank count is read from the launcher's own flags, accumulation divides by it, and an HF Trainer script
takes a launcher prefix (engine/trainers/hf/launch.py)."""

from __future__ import annotations

from pathlib import Path

from engine.trainers.hf.launch import hf_argv, launcher_of
from engine.trainers.script import template
from engine.trainers.script.world import world_size


def test_the_rank_count_comes_from_each_launchers_flags():
    assert world_size(["torchrun", "--nproc-per-node", "2", "train.py"]) == 2
    assert world_size(["python", "-m", "torch.distributed.run", "--nproc_per_node=4", "--nnodes", "2", "t.py"]) == 8
    assert world_size(["torchrun", "--nnodes", "1:2", "--nproc-per-node", "2", "t.py"]) == 4   # elastic: the most
    assert world_size(["accelerate", "launch", "--num_processes", "3", "t.py"]) == 3
    assert world_size(["deepspeed", "--num_gpus", "2", "--num_nodes", "2", "t.py"]) == 4
    assert world_size(["python", "train.py"], devices=2, num_nodes=3) == 6        # no launcher flag: the config's
    assert world_size(["torchrun", "--nproc-per-node", "gpu", "t.py"], devices=8) == 8


def test_accumulation_divides_by_the_ranks_so_the_global_batch_stays():
    values = {"python": "python", "devices": 2, "num_nodes": 1}
    launcher = [template.render(item, values) for item in ["torchrun", "--nproc-per-node", "{devices}"]]
    world = world_size(launcher)
    batch, micro = 16, 4
    assert world == 2 and batch // (micro * world) == 2      # 2 ranks x 4 x 2 = 16, not 32


def test_an_hf_script_with_several_devices_runs_under_torchrun_and_a_users_launcher_is_kept():
    assert launcher_of([], 1, "{python}") == ["{python}"]
    assert launcher_of([], 2, "{python}")[:3] == ["{python}", "-m", "torch.distributed.run"]
    accelerate = ["accelerate", "launch", "--num_processes", "{devices}"]
    assert launcher_of(accelerate, 2, "{python}") == accelerate
    values = {"python": "py", "out_dir": "out", "micro_batch_size": 2, "grad_accum": 4, "lr": "0.001", "max_steps": 10,
              "save_interval": 5, "seed": 1, "device": "cpu"}
    argv = hf_argv(Path("train.py"), values, ["--block_size", "32"], None, ["torchrun", "--nproc-per-node", "2"])
    assert argv[:4] == ["torchrun", "--nproc-per-node", "2", "train.py"]
    assert argv[argv.index("--gradient_accumulation_steps") + 1] == "4"


def test_a_scripts_whole_command_gives_its_rank_count_and_accumulation(tmp_path):
    """values_of reads the launcher part of a full `kind: script` command, whose other items are templates too."""
    from engine.trainers.run_config import load_config
    from tests.trainers.projects import DDP_SCRIPT, make_project

    project = make_project(tmp_path / "project", DDP_SCRIPT)
    loaded = load_config(project.config)
    values = template.values_of(loaded, None, loaded.config.trainer.command)
    assert values["world_size"] == 2
    assert values["grad_accum"] == loaded.config.batch_size // (loaded.config.micro_batch_size * 2)
