"""Routes of the control API, mounted at /control/ (a trailing slash is optional)."""

from __future__ import annotations

from django.urls import URLPattern, re_path

from staticagents.control import views as control

urlpatterns: list[URLPattern] = [
    re_path(r"^rules/?$", control.RulesView.as_view(), name="control-rules"),
    re_path(r"^rules/reorder/?$", control.ReorderRulesView.as_view(), name="control-reorder"),
    re_path(r"^rules/(?P<name>[-a-zA-Z0-9_]+)/?$", control.RuleView.as_view(), name="control-rule"),
    re_path(r"^defaults/?$", control.DefaultsView.as_view(), name="control-defaults"),
    re_path(r"^upstreams/?$", control.UpstreamsView.as_view(), name="control-upstreams"),
    re_path(r"^fixture/?$", control.FixtureView.as_view(), name="control-fixture"),
    re_path(r"^versions/?$", control.VersionsView.as_view(), name="control-versions"),
    re_path(
        r"^versions/(?P<number>[0-9]+)/?$", control.VersionView.as_view(), name="control-version"
    ),
    re_path(
        r"^versions/(?P<number>[0-9]+)/diff/?$",
        control.VersionDiffView.as_view(),
        name="control-version-diff",
    ),
    re_path(
        r"^versions/(?P<number>[0-9]+)/restore/?$",
        control.VersionRestoreView.as_view(),
        name="control-version-restore",
    ),
    re_path(r"^journal/?$", control.JournalView.as_view(), name="control-journal"),
    re_path(r"^sessions/(?P<key>.+?)/?$", control.SessionView.as_view(), name="control-session"),
    re_path(r"^counters/?$", control.CountersView.as_view(), name="control-counters"),
    re_path(r"^explain/?$", control.ExplainView.as_view(), name="control-explain"),
    re_path(r"", control.ControlNotFoundView.as_view()),
]
