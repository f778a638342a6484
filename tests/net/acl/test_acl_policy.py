"""The ACL 2.0 model: resource patterns, decisions (Deny wins, nothing matching refuses),
source addresses, what parsing refuses, how createAcl/updateAcl merge, and the bodies'
codec round-tripping through the model (property tests)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemq.codec.auth_bodies import (
    AclInfo,
    PolicyEntryInfo,
    PolicyInfo,
    UserInfo,
    decode_auth,
    decode_auth_list,
    encode_auth,
    encode_auth_list,
)
from tidemq.net.acl.perm import Perm
from tidemq.net.acl.policy import (
    Action,
    Decision,
    ResourceType,
    User,
    UserType,
    decide,
    merge_policies,
    parse_acl_info,
    parse_resource,
    parse_user,
    to_acl_info,
    to_user_info,
    without_resource,
)
from tidemq.net.acl.users import UserPrincipal

T = ResourceType.TOPIC


def _acl(*entries: tuple[str, list[str], str, list[str] | None]) -> AclInfo:
    return AclInfo(subject="User:u", policies=[PolicyInfo(entries=[
        PolicyEntryInfo(resource=r, actions=a, decision=d, source_ips=s)
        for r, a, d, s in entries])])


@pytest.mark.parametrize(("pattern", "topic", "matches"), [
    ("Topic:orders", "orders", True), ("Topic:orders", "orders-1", False),
    ("Topic:orders-*", "orders-1", True), ("Topic:orders-*", "orders", False),
    ("Topic:*", "anything", True), ("*", "anything", True), ("Group:*", "orders", False),
])
def test_resource_patterns(pattern: str, topic: str, matches: bool) -> None:
    assert parse_resource(pattern).matches(T, topic) is matches
    assert str(parse_resource(pattern)) == pattern


@pytest.mark.parametrize(("text", "why"), [
    ("orders", "is not 'Type:name'"), ("Queue:q", "resource type 'Queue'"),
    ("Topic:a*b", "'*' may only end"), ("Topic:", "is not 'Type:name'")])
def test_bad_resources(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_resource(text)


def test_deny_wins_and_nothing_matching_refuses() -> None:
    acl = parse_acl_info(_acl(("Topic:*", ["All"], "Allow", None),
                              ("Topic:secret", ["Pub"], "Deny", None),
                              ("Group:g", ["Sub"], "Allow", ["10.0.0.0/8", "::1"])))
    assert decide(acl, T, "open", Action.PUB, "1.2.3.4:5") is Decision.ALLOW
    assert decide(acl, T, "secret", Action.PUB, "1.2.3.4:5") is Decision.DENY
    assert decide(acl, T, "secret", Action.SUB, "1.2.3.4:5") is Decision.ALLOW
    assert decide(acl, ResourceType.GROUP, "g", Action.SUB, "10.1.2.3:9") is Decision.ALLOW
    assert decide(acl, ResourceType.GROUP, "g", Action.SUB, "[::1]:9") is Decision.ALLOW
    assert decide(acl, ResourceType.GROUP, "g", Action.SUB, "11.1.2.3:9") is None
    assert decide(None, T, "open", Action.PUB, "1.2.3.4:5") is None


def test_a_principal_maps_perms_to_actions() -> None:
    acl = parse_acl_info(_acl(("Topic:p", ["Pub"], "Allow", None),
                              ("Cluster:c1", ["Update"], "Allow", None)))
    normal = UserPrincipal(User("u", "secret1"), acl, authorize=True, cluster="c1")
    assert normal.may("topic", "p", Perm.PUB, "1.1.1.1:1")
    assert not normal.may("topic", "p", Perm.PUB | Perm.SUB, "1.1.1.1:1")
    assert normal.may("topic", "p", Perm.ANY, "1.1.1.1:1")
    assert normal.is_admin("1.1.1.1:1")
    other = UserPrincipal(User("u", "secret1"), acl, authorize=True, cluster="c2")
    assert not other.is_admin("1.1.1.1:1")
    root = UserPrincipal(User("r", "secret1", UserType.SUPER), None, authorize=True,
                         cluster="c1")
    assert root.may("group", "any", Perm.SUB, "x") and root.is_admin("x")
    disabled = UserPrincipal(User("d", "secret1", enabled=False), None, authorize=False,
                             cluster="c1")
    assert disabled.unusable() == "user d is disabled"


def test_users_parse_and_update() -> None:
    user = parse_user(UserInfo(password="secret1"), username="u")
    assert user == User("u", "secret1", UserType.NORMAL, True)
    changed = parse_user(UserInfo(user_status="disable", user_type="super"), username="u",
                         base=user)
    assert changed == User("u", "secret1", UserType.SUPER, False)
    with pytest.raises(ValueError, match="spaces"):
        parse_user(UserInfo(password="secret1"), username="a b")
    for info, why in ((UserInfo(username="x", password="secret1"), "not the header's"),
                      (UserInfo(password="123"), "at least 6"),
                      (UserInfo(password="secret1", user_type="Admin"), "userType"),
                      (UserInfo(password="secret1", user_status="on"), "userStatus")):
        with pytest.raises(ValueError, match=why):
            parse_user(info, username="u")


def test_merge_replaces_entries_of_the_same_resource() -> None:
    old = parse_acl_info(_acl(("Topic:a", ["Pub"], "Allow", None),
                              ("Topic:b", ["Sub"], "Allow", None)))
    new = parse_acl_info(_acl(("Topic:a", ["Sub"], "Deny", None)))
    merged = merge_policies(old, new)
    assert [(str(e.resource), sorted(a.value for a in e.actions), e.decision.value)
            for e in merged.entries] == [("Topic:b", ["Sub"], "Allow"),
                                         ("Topic:a", ["Sub"], "Deny")]
    rest = without_resource(merged, "Topic:b", None)
    assert rest is not None and [str(e.resource) for e in rest.entries] == ["Topic:a"]
    assert without_resource(rest, "Topic:a", "Custom") is None


_NAME = st.text(st.characters(whitelist_categories=("L", "N"), whitelist_characters="-_"),
                min_size=1, max_size=10)
_RESOURCE = st.one_of(st.just("*"), st.builds(
    lambda t, n, p: f"{t}:{n}{'*' if p else ''}",
    st.sampled_from(["Topic", "Group", "Cluster", "Namespace"]), _NAME, st.booleans()),
    st.sampled_from(["Topic:*", "Group:*"]))
_ENTRY = st.builds(
    lambda r, a, d, s: PolicyEntryInfo(resource=r, actions=sorted(set(a)), decision=d,
                                       source_ips=s or None),
    _RESOURCE, st.lists(st.sampled_from([a.value for a in Action]), min_size=1, max_size=3),
    st.sampled_from(["Allow", "Deny"]),
    st.lists(st.sampled_from(["10.0.0.0/8", "127.0.0.1/32", "::1/128"]), max_size=2,
             unique=True))


@given(st.lists(_ENTRY, min_size=1, max_size=6, unique_by=lambda e: e.resource))
def test_acl_bodies_round_trip_through_the_model(entries: list[PolicyEntryInfo]) -> None:
    info = AclInfo(subject="User:u", policies=[PolicyInfo(policy_type="Custom",
                                                          entries=entries)])
    wire = encode_auth(info)
    decoded = decode_auth(wire, AclInfo)
    acl = parse_acl_info(decoded)
    assert parse_acl_info(to_acl_info(acl)) == acl
    assert decode_auth_list(encode_auth_list([info, info]), AclInfo) == [decoded, decoded]


@given(_NAME, st.text(min_size=6, max_size=20), st.sampled_from(["Super", "Normal"]),
       st.booleans())
def test_user_bodies_round_trip(name: str, password: str, kind: str, enabled: bool) -> None:
    user = User(name, password, UserType(kind), enabled)
    info = decode_auth(encode_auth(to_user_info(user, with_password=True)), UserInfo)
    assert parse_user(info) == user
    assert to_user_info(user).password is None
