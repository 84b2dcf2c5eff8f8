"""Suite-wide hypothesis settings: a failing property stops at its first counterexample and shrinks it,
without the explain phase (it traces every line, many times slower on a template render). Hunting for more
distinct failures after the first, as hypothesis does by default, can outlast pytest-timeout, whose thread
method then ends the whole run without a report."""

from hypothesis import Phase, settings

settings.register_profile("tokworker", report_multiple_bugs=False,
                          phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink])
settings.load_profile("tokworker")
