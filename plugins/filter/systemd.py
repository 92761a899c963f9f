# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Jinja filters that write values into systemd unit files safely (module_utils/systemd_unit.py quotes)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from typing import Any, Callable, Dict

from ansible_collections.llmops.vllm.plugins.module_utils.systemd_unit import (environment_file_text, read_environment_file,
                                                                               systemd_environment,
                                                                               systemd_exec, systemd_quote, systemd_value)


class FilterModule(object):
    def filters(self) -> Dict[str, Callable[..., Any]]:
        return {"systemd_exec": systemd_exec, "systemd_quote": systemd_quote,
                "systemd_environment": systemd_environment, "systemd_value": systemd_value, "environment_file": read_environment_file,
                "environment_file_text": environment_file_text}
