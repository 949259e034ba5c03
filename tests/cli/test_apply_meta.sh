# test_apply_meta.sh - what `oomless apply` keeps of a file besides its bytes: the owner and group
# (as root, and as a user of a team group, through setpriv), extended attributes and POSIX ACLs
# (set with python3's os.setxattr), the backup's too; what it refuses rather than change
# silently; and a file with several hard links.
. "$(dirname "$0")/lib.sh"

D="$OOMLESS_SRC/tests/data/apply"
W="$TMP/work"
SET=(--set data_loader.batch_size=literal:8)

fresh() {
    rm -rf "$W"
    mkdir -p "$W/conf"
    cp "$D/config.yaml" "$W/conf/config.yaml"
    chmod 640 "$W/conf/config.yaml"
    cd "$W" || exit 1
}
no_temps() { expect_eq "$(find "$W" -name '.*.oomless-*' | wc -l)" 0 "$1: temporary files left"; }
unchanged() {
    if cmp -s conf/config.yaml "$D/config.yaml"; then ok; else bad "$1: the file changed"; fi
}
edited() {
    expect_eq "$(grep -c 'batch_size: 8 ' conf/config.yaml)" 1 "$1: edited"
}
# xattr FILE NAME: the attribute's value in hex ("none" when absent)
xattr() {
    python3 -c 'import os, sys
try: print(os.getxattr(sys.argv[1], sys.argv[2]).hex())
except OSError: print("none")' "$1" "$2"
}
# set_xattr FILE NAME HEXVALUE; fails when the file system cannot hold it
set_xattr() {
    python3 -c 'import os, sys; os.setxattr(sys.argv[1], sys.argv[2], bytes.fromhex(sys.argv[3]))' \
        "$@" 2>/dev/null
}
# a POSIX ACL in the kernel's xattr form (version 2, then tag/perm/id entries sorted by tag):
# acl "1:6" "2:6:65534" ... with tags 1 user::, 2 user:ID, 4 group::, 8 group:ID, 16 mask, 32 other
acl() {
    python3 -c 'import struct, sys
out = struct.pack("<I", 2)
for e in sys.argv[1:]:
    f = [int(x) for x in e.split(":")]
    out += struct.pack("<HHI", f[0], f[1], f[2] if len(f) > 2 else 0xFFFFFFFF)
print(out.hex())' "$@"
}

# ---- hard links: a rename would leave the other names with the old text: refused -------------
fresh
ln conf/config.yaml conf/other-name.yaml
oom apply "${SET[@]}" conf/config.yaml
expect_rc 1 "a file with two hard links"
expect_contains "$ERR" "'conf/config.yaml' has 2 hard links" "hard links: message"
unchanged "hard links"
expect_eq "$(stat -c %h conf/config.yaml)" 2 "hard links: still linked"
expect_eq "$(ls conf)" "config.yaml
other-name.yaml" "hard links: no backup"
no_temps "hard links"
oom apply "${SET[@]}" --dry-run conf/config.yaml
expect_rc 0 "hard links: a dry run"
unchanged "hard links: a dry run writes nothing"
expect_contains "$OUT" "+  batch_size: 8 " "hard links: a dry run shows the diff"

# ---- a write-protected file (0444): refused, byte for byte as it was, unless --force -----------
# (before: replaced silently; as root too, whom the mode does not stop)
fresh
chmod 444 conf/config.yaml
oom apply "${SET[@]}" conf/config.yaml
expect_rc 1 "a write-protected file"
expect_contains "$ERR" "'conf/config.yaml' is write-protected (mode 0444)" \
    "write-protected: the file and its mode named"
expect_contains "$ERR" "give --force" "write-protected: the way out said"
unchanged "write-protected"
expect_eq "$(stat -c %a conf/config.yaml)" 444 "write-protected: mode unchanged"
expect_eq "$(ls conf)" "config.yaml" "write-protected: no backup"
no_temps "write-protected"
oom apply "${SET[@]}" --dry-run conf/config.yaml
expect_rc 0 "write-protected: a dry run writes nothing, so it is not refused"
unchanged "write-protected: dry run"
oom apply "${SET[@]}" --force conf/config.yaml
expect_rc 0 "write-protected, --force"
edited "write-protected, --force"
expect_eq "$(stat -c %a conf/config.yaml)" 444 "write-protected, --force: the mode kept"
# one of two files protected: neither is written
fresh
cp "$D/config.yaml" conf/second.yaml
chmod 400 conf/second.yaml
oom apply "${SET[@]}" conf/config.yaml conf/second.yaml
expect_rc 1 "two files, the second write-protected"
expect_contains "$ERR" "'conf/second.yaml' is write-protected (mode 0400)" "two files: named"
unchanged "two files: the writable one is not written either"

# ---- extended attributes and POSIX ACLs are kept; one inherited from the directory is not added
fresh
if set_xattr conf/config.yaml user.origin 7465616d; then
    oom apply "${SET[@]}" conf/config.yaml
    expect_rc 0 "a file with a user.* attribute"
    edited "user.* attribute"
    expect_eq "$(xattr conf/config.yaml user.origin)" 7465616d "user.* attribute kept"
    expect_eq "$(xattr conf/config.yaml.bak user.origin)" 7465616d "user.* attribute on the backup"
else
    echo "test_apply_meta.sh: user.* attribute checks skipped: the file system of $TMP has no" \
        "user extended attributes"
fi
fresh
ACL=$(acl 1:6 2:6:65534 4:4 16:6 32:0)
if set_xattr conf/config.yaml system.posix_acl_access "$ACL"; then
    mode=$(stat -c %a conf/config.yaml)
    oom apply "${SET[@]}" conf/config.yaml
    expect_rc 0 "a file with an ACL"
    edited "ACL"
    expect_eq "$(xattr conf/config.yaml system.posix_acl_access)" "$ACL" "ACL kept"
    expect_eq "$(xattr conf/config.yaml.bak system.posix_acl_access)" "$ACL" "ACL on the backup"
    expect_eq "$(stat -c %a conf/config.yaml)" "$mode" "mode with an ACL"
    # a default ACL on the directory would give a new file an ACL the old one did not have
    fresh
    set_xattr conf system.posix_acl_default "$(acl 1:7 2:7:65534 4:5 16:7 32:5)"
    oom apply "${SET[@]}" conf/config.yaml
    expect_rc 0 "a directory with a default ACL"
    expect_eq "$(xattr conf/config.yaml system.posix_acl_access)" none "no ACL added"
    expect_eq "$(stat -c %a conf/config.yaml)" 640 "mode under a default ACL"
else
    echo "test_apply_meta.sh: ACL checks skipped: the file system of $TMP has no POSIX ACLs"
fi

if [ "$(id -u)" != 0 ]; then
    echo "test_apply_meta.sh: owner and group checks skipped: they need root (to make files of" \
        "other users and to run as one)"
    finish
    exit
fi

# ---- as root: another user's file stays theirs, and so does its backup ------------------------
fresh
chown 65534:65534 conf/config.yaml
oom apply "${SET[@]}" conf/config.yaml
expect_rc 0 "root edits a user's file"
edited "root edits a user's file"
expect_eq "$(stat -c %u:%g:%a conf/config.yaml)" 65534:65534:640 "owner, group and mode kept"
expect_eq "$(stat -c %u:%g:%a conf/config.yaml.bak)" 65534:65534:640 "the backup's too"

# ---- as a user of a team group (uid 65534 in group 4242), in a group-writable directory ------
if ! command -v setpriv >/dev/null; then
    echo "test_apply_meta.sh: team checks skipped: no setpriv"
    finish
    exit
fi
mkdir -p "$TMP/bin"
cp "$OOMLESS_BIN" "$TMP/bin/oomless"
chmod 755 "$TMP" "$TMP/bin" "$TMP/bin/oomless"
as_user() { # as_user ARGS...: oomless apply as uid 65534, groups 65534 and 4242
    setpriv --reuid 65534 --regid 65534 --groups 4242 -- "$TMP/bin/oomless" apply "$@" \
        >"$TMP/out" 2>"$TMP/err"
    RC=$? OUT=$(cat "$TMP/out") ERR=$(cat "$TMP/err")
}
if ! setpriv --reuid 65534 --regid 65534 --groups 4242 -- "$TMP/bin/oomless" --version \
    >/dev/null 2>&1; then
    echo "test_apply_meta.sh: team checks skipped: uid 65534 cannot run $TMP/bin/oomless"
    finish
    exit
fi
team() { # team OWNER:GROUP MODE: conf/config.yaml in a directory of group 4242, mode 775
    fresh
    chown 65534:4242 conf
    chmod 775 conf
    chown "$1" conf/config.yaml
    chmod "$2" conf/config.yaml
}
# the user's own file in the team's group: the group stays the team's
team 65534:4242 664
as_user "${SET[@]}" conf/config.yaml
expect_rc 0 "a user edits a team file"
edited "a user edits a team file"
expect_eq "$(stat -c %u:%g:%a conf/config.yaml)" 65534:4242:664 "team file: group kept"
expect_eq "$(stat -c %u:%g:%a conf/config.yaml.bak)" 65534:4242:664 "team file: backup's group"
# a teammate's file: the replacement would be the user's: refused
team 4343:4242 664
as_user "${SET[@]}" conf/config.yaml
expect_rc 1 "a user edits a teammate's file"
expect_contains "$ERR" "'conf/config.yaml' belongs to user 4343" "teammate's file: message"
unchanged "teammate's file"
expect_eq "$(stat -c %u:%g conf/config.yaml)" 4343:4242 "teammate's file: owner"
expect_eq "$(ls conf)" "config.yaml" "teammate's file: no backup"
no_temps "teammate's file"
# the user's file in a group the user is not in: refused
team 65534:4244 644
as_user "${SET[@]}" conf/config.yaml
expect_rc 1 "a file of a group the user is not in"
expect_contains "$ERR" "'conf/config.yaml' has group 4244" "foreign group: message"
unchanged "foreign group"
expect_eq "$(stat -c %u:%g conf/config.yaml)" 65534:4244 "foreign group: group"
no_temps "foreign group"

finish
