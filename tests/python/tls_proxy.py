#!/usr/bin/env python3
"""A TLS-terminating TCP proxy for tests: serves HTTPS on a loopback port with the given
certificate and key, and forwards every connection's bytes to a plain upstream.

    tls_proxy.py CERT_PEM KEY_PEM UPSTREAM_HOST:PORT

Prints "listening on PORT" once it accepts connections; runs until killed."""
import socket
import ssl
import sys
import threading


def pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def serve(conn, upstream):
    try:
        up = socket.create_connection(upstream)
    except OSError:
        conn.close()
        return
    threading.Thread(target=pump, args=(conn, up), daemon=True).start()
    pump(up, conn)


def main():
    cert, key, target = sys.argv[1], sys.argv[2], sys.argv[3]
    host, port = target.rsplit(":", 1)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    print("listening on %d" % listener.getsockname()[1], flush=True)
    while True:
        raw, _ = listener.accept()
        try:
            conn = ctx.wrap_socket(raw, server_side=True)
        except (ssl.SSLError, OSError):
            raw.close()
            continue
        threading.Thread(target=serve, args=(conn, (host, int(port))), daemon=True).start()


if __name__ == "__main__":
    main()
