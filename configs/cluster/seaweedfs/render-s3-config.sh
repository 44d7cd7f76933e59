# render-s3-config.sh TEMPLATE OUT: the identities with their keys, readable by the owner
# only. Each ${NAME} of the template is the variable NAME, set from a Secret; an unset or
# empty one, or one holding a character a JSON string or this substitution would take
# for syntax, stops here with one line (nothing written), rather than an S3 gateway with
# a broken or open identity.
set -eu
template=$1
out=$2
umask 077
partial="$out.partial"
cp "$template" "$partial"
for name in $(grep -o '[$][{][A-Z_]*[}]' "$template" | tr -d '${}' | sort -u); do
  eval "value=\${$name:-}"
  if [ -z "$value" ]; then
    echo "render-s3-config: $name is unset or empty: its Secret lacks the key (configs/cluster/secrets.example.yaml)" >&2
    rm -f "$partial"
    exit 2
  fi
  case "$value" in
    *[!A-Za-z0-9+/=._-]*)
      echo "render-s3-config: $name holds a character outside A-Za-z0-9+/=._-; make it again, e.g. openssl rand -hex 20" >&2
      rm -f "$partial"
      exit 2
      ;;
  esac
  sed -i "s|[$][{]$name[}]|$value|g" "$partial"
done
mv "$partial" "$out"
