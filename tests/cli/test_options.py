"""Settings given as options or MS_* variables are checked as the service checks them; a bad one is a usage error
(exit code 2) naming the setting, or the settings where the error concerns several."""

from __future__ import annotations


def test_a_bad_setting_is_a_usage_error_naming_it(run_cli):
    bad_setting = run_cli("serve", env={"MS_PORT": "eighty"})
    assert bad_setting.returncode == 2 and "setting port" in bad_setting.stderr
    assert "Traceback" not in bad_setting.stderr


def test_an_error_about_two_settings_names_both(run_cli, tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text("secret")
    both = run_cli("index", "--catalog", "c.csv", "--api-key", "k", env={"MS_API_KEY_FILE": str(key_file)})
    assert both.returncode == 2
    assert "MS_API_KEY and MS_API_KEY_FILE are both set: set one of them" in both.stderr
    assert "setting " not in both.stderr  # no one setting to blame
