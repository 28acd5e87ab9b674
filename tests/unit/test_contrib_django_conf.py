"""The ``WHEELQ`` Django setting (`wheelq.contrib.django.conf.load_app`): the app it names,
its URL replaced by the setting's, and every mistake refused naming the key."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

import wheelq
from wheelq.contrib.django.conf import load_app

APP = wheelq.App("redis://127.0.0.1:1/0")
NOT_AN_APP = object()


def test_app_names_the_app_object_and_url_replaces_its_url() -> None:
    assert load_app({"APP": f"{__name__}:APP"}) is APP
    assert APP.url == "redis://127.0.0.1:1/0"
    try:
        assert load_app({"APP": f"{__name__}:APP", "URL": "redis://127.0.0.1:2/3"}) is APP
        assert APP.url == "redis://127.0.0.1:2/3"
    finally:
        APP.url = "redis://127.0.0.1:1/0"


@pytest.mark.parametrize(
    ("setting", "said"),
    [
        (None, 'the WHEELQ setting is missing: add WHEELQ = {"APP"'),
        ("tasks:app", "WHEELQ must be a dict"),
        ({"APP": f"{__name__}:APP", "GROUP": "x"}, "WHEELQ has no key 'GROUP'"),
        ({}, "WHEELQ['APP'] must be module:app, got None"),
        ({"APP": f"{__name__}.APP"}, "WHEELQ['APP'] must be module:app"),
        ({"APP": "no_such_module_here:app"}, "no module named 'no_such_module_here'"),
        ({"APP": f"{__name__}:MISSING"}, "has no attribute 'MISSING'"),
        ({"APP": f"{__name__}:NOT_AN_APP"}, "is a object, not a wheelq.App"),
        ({"APP": f"{__name__}:APP", "URL": 6379}, "WHEELQ['URL'] must be a Redis URL"),
    ],
)
def test_a_bad_setting_is_improperly_configured_naming_the_key(setting: object, said: str) -> None:
    with pytest.raises(ImproperlyConfigured) as raised:
        load_app(setting)
    assert said in str(raised.value)
    assert APP.url == "redis://127.0.0.1:1/0"
