#pragma once
// ZeroMQ CURVE keys (Z85 text, 40 characters) and their files, in the certificate format of czmq and
// pyzmq (zmq.auth.load_certificate reads them):
//   NAME.key         public-key = "..."                   (give it to the other side)
//   NAME.key_secret  public-key = "..." secret-key = "..." (mode 0600, keep it)
// A server holds a key pair and the public keys of the clients it admits; a client holds a key pair
// and the server's public key.
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace mwb::ipc {

struct KeyPair {
    std::string public_key;  ///< Z85, 40 characters
    std::string secret_key;  ///< Z85, 40 characters ("" when only the public key is known)
};

struct ServerCurve {
    KeyPair server;
    std::vector<std::string> allowed_clients;  ///< Z85 public keys admitted (checked by the ZAP handler)
};

struct ClientCurve {
    KeyPair client;
    std::string server_public_key;
};

/// True when this libzmq was built with CURVE (zmq_has("curve")).
bool curve_available();
/// A fresh key pair; throws Error when CURVE is not available.
KeyPair generate_key_pair();
/// True for 40 characters of the Z85 alphabet.
bool valid_z85_key(std::string_view key);

/// Writes `base`.key (public) and `base`.key_secret (both keys, mode 0600); returns the two paths.
std::pair<std::filesystem::path, std::filesystem::path> write_key_files(const std::filesystem::path& base,
                                                                        const KeyPair& keys);
/// Reads a key file with a secret key (NAME.key_secret); throws Error naming the file otherwise.
KeyPair load_secret_key_file(const std::filesystem::path& file);
/// Reads one public key: a certificate file (public-key = "...") or a bare 40-character Z85 key.
std::string load_public_key(const std::filesystem::path& file_or_key);
/// Reads allowed public keys from a certificate file, a text file with one Z85 key per line, or a
/// directory of *.key files. Throws Error naming the path when none is found.
std::vector<std::string> load_public_keys(const std::filesystem::path& path);

/// The Z85 text of a 32-byte binary key ("" when it is not 32 bytes).
std::string z85_from_binary(std::string_view key32);

}  // namespace mwb::ipc
