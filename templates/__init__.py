"""Every file tritonfleet renders (Jinja2). A package only so the templates ship inside the wheel
(`tritonfleet/templates` is a symlink to this directory); load them with `tritonfleet.templating`."""
