"""`parinfo profiles`: the shipped profiles and what each is for."""
from __future__ import annotations

import typer


def profiles(
    json_out: bool = typer.Option(False, "--json", help="Print the list as JSON."),
) -> None:
    """List the shipped profiles with their descriptions (use them by name with `parinfo apply`)."""
    from parinfo.profiles.loading import list_profiles

    items = list_profiles()
    if json_out:
        import json

        typer.echo(json.dumps(items, indent=2))
        return
    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("profile", style="bold", no_wrap=True)
    table.add_column("description", overflow="fold")
    for item in items:
        table.add_row(item["name"], item["description"])
    console = Console()
    console.print(table)
    console.print("[dim]Show what one means here: parinfo apply NAME.  Files: "
                  f"{items[0]['path'].rsplit('/', 1)[0] if items else 'none found'}[/dim]", soft_wrap=True)
