"""One grammar for every command that reads a run: `runbook CMD [CONFIG]`, or `-c/--config CONFIG`
(the option kept for scripts written before the positional existed), default configs/run_config.yaml."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer
from typer.core import TyperGroup

from runbook.exit_codes import ExitCode

if TYPE_CHECKING:
    from typer._click import Context   # the click typer vendors: its TyperGroup's parse_args takes this

DEFAULT_CONFIG = Path("configs/run_config.yaml")
CONFIG_HELP = f"run config (YAML), default {DEFAULT_CONFIG}"


# Any, as typer's own Argument and Option declare: the default of a parameter typed Optional[Path].
def config_argument(help: str = CONFIG_HELP) -> Any:
    return typer.Argument(None, metavar="CONFIG", help=help, show_default=False)


def config_option(help: str = "the run config, as an option (same as CONFIG)") -> Any:
    return typer.Option(None, "--config", "-c", help=help, show_default=False)


def chosen_config(positional: Optional[Path], option: Optional[Path]) -> Path:
    """The run config the user named, either way; naming two different ones is a usage error."""
    if positional is not None and option is not None and positional != option:
        typer.echo(f"error: two run configs given ({positional} and --config {option}); give one", err=True)
        raise typer.Exit(int(ExitCode.USAGE))
    return positional or option or DEFAULT_CONFIG


class ConfigGroup(TyperGroup):
    """A command group that takes [CONFIG] itself (`runbook incidents [CONFIG]`) and has subcommands
    (`runbook incidents show ID [CONFIG]`): the group's optional positional would otherwise take the
    subcommand's name, so everything from the first subcommand name on is the subcommand's."""

    def parse_args(self, ctx: Context, args: list[str]) -> list[str]:
        split = next((i for i, arg in enumerate(args) if arg in self.commands), None)
        if split is None:
            return super().parse_args(ctx, args)
        super().parse_args(ctx, args[:split])
        ctx._protected_args, ctx.args = args[split:split + 1], args[split + 1:]
        return ctx.args
