"""The ``parinfo`` command line: a thin layer over the library.

``main()`` is the one place errors become exit codes: a ParinfoError (bad input) prints one line on
stderr and exits 2; usage errors are the CLI framework's, also exit 2.

Loading the CLI framework (typer, which loads rich for its help) costs more than a launch itself and
a large share of a report's start-up. So ``main()`` runs two plain forms without it: a launch (``parinfo apply PROFILE
[--force] [--instances N] -- COMMAND ...``, see parinfo.cli.launch) and ``parinfo show`` with plain
options (see parinfo.cli.show). Both are read from the command's one declaration of its options
(parinfo.cli.options), from which its typer command is also built. Every other form (help, other
commands, unusual spellings, mistakes) goes to the typer app in ``_app``, whose commands run through
the same functions.
"""
from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``parinfo`` script and ``python -m parinfo``."""
    from parinfo.errors import ParinfoError

    args = sys.argv[1:] if argv is None else list(argv)
    if sys.stdout is None:
        _error("standard output is closed: give parinfo somewhere to write (> FILE, | less, or > /dev/null)")
        sys.exit(2)
    try:
        code = _run_plain(args)
        if code is None:
            try:
                code = _run_app(args)
            finally:
                _flush_stdout()
        if argv is None:
            _skip_last_collection()
        sys.exit(code)
    except ParinfoError as exc:
        _error(str(exc))
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        _silence_stdout()  # the reader went away (| head): nothing left to say
        sys.exit(1)
    except OSError as exc:
        if exc.filename is not None or not _is_stdout_error(exc):
            raise
        _silence_stdout()
        _error(f"cannot write the output: {exc.strerror or exc}")
        sys.exit(2)


def _skip_last_collection() -> None:
    """The command is done and the process is about to end: put every object out of the cyclic
    collector's reach, so that the interpreter's last collection at exit has nothing to walk (some
    12 ms in a process that loaded numpy, a tenth of a ``parinfo show``). Memory is freed by the
    exit either way. Only for the process's own command line: a caller of ``main(argv)`` keeps its
    collector."""
    import gc

    gc.freeze()


def _run_plain(args: list[str]) -> int | None:
    """Run a plain launch or a plain ``show`` without loading typer; None for any other command line."""
    if args[:1] == ["apply"]:
        from parinfo.cli.launch import launch, plain_launch

        plain = plain_launch(args)
        if plain is not None and plain.command is not None:
            return launch(plain.profile, plain.command, force=plain.force, instances=plain.instances,
                          instance_index=plain.instance_index, log_dir=plain.log_dir, check=plain.check)
        return None
    from parinfo.cli import show

    options = show.plain_args(args)
    if options is None:
        return None
    try:
        return show.run(options)
    finally:
        _flush_stdout()


def _run_app(args: list[str]) -> int:
    """Run the typer app; a usage mistake becomes one line on stderr (not a box) and exit 2."""
    import importlib

    import typer

    from parinfo.cli._app import app

    # typer vendors click from 0.2x on and imports it before: take the classes from where they are.
    click_errors = importlib.import_module(typer.BadParameter.__module__)
    no_args = getattr(click_errors, "NoArgsIsHelpError", ())
    if args[:1] in (["show"], ["host"]) or args[:2] == ["fleet", "show"]:
        from parinfo.cli.show import normalise_check

        args = normalise_check(args)
    try:
        result = app(args=args, prog_name=_prog_name(), standalone_mode=False)
    except no_args as exc:
        print(exc.ctx.get_help() if exc.ctx is not None else exc.format_message())
        return 2
    except click_errors.UsageError as exc:
        hint = f" (see {exc.ctx.command_path} --help)" if exc.ctx is not None else ""
        _error(_one_line(exc.format_message()) + hint)
        code: int = exc.exit_code
        return code
    except click_errors.ClickException as exc:
        _error(_one_line(exc.format_message()))
        code = exc.exit_code
        return code
    except (getattr(click_errors, "Abort", typer.Abort), typer.Abort):
        return 130
    return result if isinstance(result, int) else 0


def _prog_name() -> str:
    """How the user called us, for usage lines: ``python -m parinfo`` or ``parinfo``."""
    import os

    return "python -m parinfo" if os.path.basename(sys.argv[0] or "") == "__main__.py" else "parinfo"


def _one_line(text: str) -> str:
    from parinfo.safe_text import shorten

    return shorten(" ".join(text.split()), 300)


def _flush_stdout() -> None:
    if sys.stdout is not None:
        sys.stdout.flush()


def _is_stdout_error(exc: OSError) -> bool:
    """Errors that writing to a full, closed or odd standard output raises."""
    import errno

    return exc.errno in (errno.ENOSPC, errno.EBADF, errno.EIO, errno.EFBIG, errno.EDQUOT, errno.EINVAL)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail a second time."""
    import os

    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, 1)
        os.close(fd)
    except OSError:
        pass


def _error(text: str) -> None:
    try:
        print(f"parinfo: error: {text}", file=sys.stderr)
    except (OSError, AttributeError, ValueError):
        pass
