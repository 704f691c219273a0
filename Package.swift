// swift-tools-version:6.1
import PackageDescription

let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny")
]

let package = Package(
    name: "belfry",
    platforms: [.macOS(.v14), .iOS(.v17)],
    products: [
        .executable(name: "belfry", targets: ["belfry"]),
        .library(name: "BelfryCore", targets: ["BelfryCore"]),
        .library(name: "BelfryServer", targets: ["BelfryServer"]),
        .library(name: "BelfryClient", targets: ["BelfryClient"]),
        .library(name: "BelfryActivity", targets: ["BelfryActivity"]),
    ],
    dependencies: [
        .package(url: "https://github.com/vapor/vapor.git", from: "4.122.3"),
        .package(url: "https://github.com/vapor/fluent.git", from: "4.13.0"),
        .package(url: "https://github.com/vapor/fluent-sqlite-driver.git", from: "4.9.0"),
        .package(url: "https://github.com/vapor/fluent-postgres-driver.git", from: "2.14.0"),
        .package(url: "https://github.com/vapor/sql-kit.git", from: "3.36.0"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/vapor/jwt-kit.git", from: "5.8.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-crypto.git", "4.0.0"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.0"),
        .package(url: "https://github.com/apple/swift-nio-http2.git", from: "1.46.0"),
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.0"),
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.0"),
        .package(url: "https://github.com/x-sheep/swift-property-based.git", from: "2.0.1"),
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        .package(url: "https://github.com/hummingbird-project/swift-mustache.git", from: "2.1.1"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
    ],
    targets: [
        // Foundation-only wire types, workspace config and the preference rule,
        // shared by the server and the client SDK.
        .target(name: "BelfryCore", swiftSettings: swiftSettings),
        // The SDK an app embeds: Foundation and BelfryCore only, for Linux and Apple platforms.
        .target(name: "BelfryClient", dependencies: ["BelfryCore"], swiftSettings: swiftSettings),
        // The app's reading activity (seed 002): saved articles in a local SQLite store through
        // GRDB, and the migration from the app's older store. Its own target, so the SDK stays
        // Foundation-only.
        .target(
            name: "BelfryActivity",
            dependencies: [.product(name: "GRDB", package: "GRDB.swift")],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "BelfryServer",
            dependencies: [
                "BelfryCore",
                "BelfryAPNs",
                "BelfryFCM",
                "BelfryWebPush",
                "BelfryMail",
                "BelfryHTTP1",
                "BelfryHTTP2",
                "BelfryJSON",
                .product(name: "Vapor", package: "vapor"),
                .product(name: "Mustache", package: "swift-mustache"),
                .product(name: "Fluent", package: "fluent"),
                .product(name: "FluentSQLiteDriver", package: "fluent-sqlite-driver"),
                .product(name: "FluentPostgresDriver", package: "fluent-postgres-driver"),
                .product(name: "SQLKit", package: "sql-kit"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ],
            resources: [.copy("Resources")],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "belfry",
            dependencies: ["BelfryServer"],
            swiftSettings: swiftSettings
        ),
        // APNs requests (payload shaped to the device, headers), Apple's reasons, and the
        // provider token cache: Crypto only. The server adapts its rows to its plain values.
        .target(
            name: "BelfryAPNs",
            dependencies: ["BelfryJSON", .product(name: "Crypto", package: "swift-crypto")],
            swiftSettings: swiftSettings
        ),
        // FCM HTTP v1 messages shaped to the device, FCM's error codes, the service account and
        // its OAuth access tokens (an RS256 assertion): Crypto only. The server does the HTTP.
        .target(
            name: "BelfryFCM",
            dependencies: [
                "BelfryJSON",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        // A JSON object written straight to bytes, for push payloads built on every send.
        .target(name: "BelfryJSON", swiftSettings: swiftSettings),
        // Web Push message encryption (RFC 8291) and VAPID (RFC 8292): Crypto only.
        .target(
            name: "BelfryWebPush",
            dependencies: [.product(name: "Crypto", package: "swift-crypto")],
            swiftSettings: swiftSettings
        ),
        // Email: RFC 5322/MIME messages and an SMTP client (STARTTLS, AUTH, pipelining, a
        // connection pool) on SwiftNIO. Nothing of the server's.
        .target(
            name: "BelfryMail",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            swiftSettings: swiftSettings
        ),
        // An HTTP/1.1 client for webhooks: kept-alive connections per origin, a request written
        // whole, on SwiftNIO only.
        .target(
            name: "BelfryHTTP1",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            swiftSettings: swiftSettings
        ),
        // An HTTP/2-only client over TLS for push services (APNs, and FCM next): a connection per
        // origin, a stream per request, on SwiftNIO only.
        .target(
            name: "BelfryHTTP2",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            swiftSettings: swiftSettings
        ),
        // Local stand-ins for the push services (APNs, FCM and its token endpoint, Web Push
        // endpoints): real TLS and HTTP/2, used by the tests and the benchmarks.
        .target(
            name: "BelfryTestServers",
            dependencies: [
                "BelfryWebPush",
                .product(name: "CryptoExtras", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "belfry-bench",
            dependencies: ["BelfryServer", "BelfryTestServers", "BelfryWebPush", "BelfryClient"],
            swiftSettings: swiftSettings
        ),
        // An app on Linux built on the SDK, with the OS parts scripted: watch the push flow locally.
        .executableTarget(
            name: "belfry-device",
            dependencies: ["BelfryClient", "BelfryCore"],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "BelfryTestSupport",
            dependencies: [
                "BelfryServer",
                "BelfryTestServers",
                .product(name: "VaporTesting", package: "vapor"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BelfryCoreTests",
            dependencies: [
                "BelfryCore",
                .product(name: "PropertyBased", package: "swift-property-based"),
            ],
            resources: [.copy("Fixtures")],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BelfryClientTests",
            dependencies: ["BelfryClient", "BelfryCore", "BelfryTestSupport"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BelfryActivityTests",
            dependencies: ["BelfryActivity"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BelfryAPNsTests",
            dependencies: ["BelfryAPNs", .product(name: "Crypto", package: "swift-crypto")],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BelfryFCMTests",
            dependencies: [
                "BelfryFCM",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BelfryHTTP1Tests",
            dependencies: [
                "BelfryHTTP1",
                "BelfryTestServers",
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BelfryHTTP2Tests",
            dependencies: [
                "BelfryHTTP2",
                "BelfryTestServers",
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BelfryMailTests",
            dependencies: ["BelfryMail"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BelfryWebPushTests",
            dependencies: ["BelfryWebPush", .product(name: "Crypto", package: "swift-crypto")],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BelfryServerTests",
            dependencies: [
                "BelfryServer",
                "BelfryTestSupport",
                "BelfryTestServers",
                "BelfryWebPush",
                "BelfryMail",
                "BelfryClient",
                .product(name: "VaporTesting", package: "vapor"),
                .product(name: "SQLKit", package: "sql-kit"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
            ],
            swiftSettings: swiftSettings
        ),
    ],
    swiftLanguageModes: [.v6]
)
